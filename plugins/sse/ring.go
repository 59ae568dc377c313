package main

import (
	"bytes"
	"encoding/json"
	"sync"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

// ring is the retention window: the last events delivered, oldest first,
// bounded by count and age, each already rendered as an SSE frame so that
// a thousand clients cost one encoding. Appending never waits for a
// client: clients read at their own pace and learn from a gap frame when
// the window moved past them.
type ring struct {
	maxEvents int
	maxBytes  int // frame bytes retained at most
	maxAge    time.Duration
	now       func() time.Time

	mu    sync.Mutex
	buf   []stored // retained events, oldest first
	bytes int      // frame bytes in buf
	next  uint64   // sequence number the next appended event gets
	// lastEvicted is the id of the newest event that left the window, zero
	// when none has: a client resuming exactly there has missed nothing.
	lastEvicted pluginkit.EventID
	// wake is closed (and replaced) whenever events are appended.
	wake chan struct{}
}

// stored is one retained event.
type stored struct {
	seq uint64
	// id is the event's id; for a gap marker, the id of the event after
	// the hole.
	id    pluginkit.EventID
	gap   bool   // a marker: walcast dropped events for this sink here
	table string // schema.table, for per-client filters
	op    pluginkit.Op
	route string // the channel the sink's route expression chose; empty without one
	at    time.Time
	frame []byte
}

func newRing(maxEvents, maxBytes int, maxAge time.Duration, now func() time.Time) *ring {
	return &ring{maxEvents: maxEvents, maxBytes: maxBytes, maxAge: maxAge, now: now, wake: make(chan struct{})}
}

// append adds events in id order and returns how many it skipped.
// Events at or below the newest retained id are redeliveries (the host
// retried a batch) or replayed parked events, and are skipped, so ids in
// the window only grow and Last-Event-ID stays meaningful. gapBefore puts
// a gap marker before the first new event: the host dropped events for
// this sink there, and every client passing it is told.
func (r *ring) append(events []pluginkit.Event, gapBefore bool) (skipped int) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	added := false
	for _, e := range events {
		if n := len(r.buf); n > 0 && e.ID.Compare(r.buf[n-1].id) <= 0 {
			skipped++
			continue
		}
		if e.ID.Compare(r.lastEvicted) <= 0 && !r.lastEvicted.IsZero() {
			skipped++
			continue
		}
		if gapBefore {
			r.buf = append(r.buf, stored{seq: r.next, id: e.ID, gap: true, at: now})
			r.next++
			gapBefore = false
		}
		f := changeFrame(e)
		r.buf = append(r.buf, stored{seq: r.next, id: e.ID, table: e.Schema + "." + e.Table, op: e.Op, route: e.Route, at: now, frame: f})
		r.bytes += len(f)
		r.next++
		added = true
	}
	r.evictLocked(now)
	if added {
		close(r.wake)
		r.wake = make(chan struct{})
	}
	return skipped
}

// evictLocked drops what is past the count, the size or the age limit.
// The newest event always stays, however large.
func (r *ring) evictLocked(now time.Time) {
	drop := max(0, len(r.buf)-r.maxEvents)
	for i := range drop {
		r.bytes -= len(r.buf[i].frame)
	}
	for drop < len(r.buf)-1 && ((r.maxAge > 0 && now.Sub(r.buf[drop].at) > r.maxAge) || (r.maxBytes > 0 && r.bytes > r.maxBytes)) {
		r.bytes -= len(r.buf[drop].frame)
		drop++
	}
	if drop == 0 {
		return
	}
	for i := drop - 1; i >= 0; i-- {
		if !r.buf[i].gap {
			r.lastEvicted = r.buf[i].id
			break
		}
	}
	clear(r.buf[:drop]) // let the frames go
	r.buf = r.buf[drop:]
	if cap(r.buf) > 2*r.maxEvents && len(r.buf) < cap(r.buf)/4 {
		r.buf = append([]stored(nil), r.buf...) // give the old array back
	}
}

// cursor says where a client is: the sequence number of the next event it
// should get.
type cursor uint64

// gapInfo describes events a client cannot get any more. Oldest is null
// when the window holds no event (nothing delivered since this process
// started, or all of it expired): never an empty string, which no client
// could tell from an id.
type gapInfo struct {
	Requested string  `json:"requested"`
	Oldest    *string `json:"oldest"`
}

func idPtr(id pluginkit.EventID) *string {
	s := id.String()
	return &s
}

// resume returns the cursor for a client that last saw id, and a gap when
// events after id may have left the window (or were never in it: before
// this process started).
func (r *ring) resume(id pluginkit.EventID) (cursor, *gapInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evictLocked(r.now())
	// The first retained event after id.
	i := len(r.buf)
	for j, s := range r.buf {
		if s.id.Compare(id) > 0 {
			i = j
			break
		}
	}
	c := cursor(r.next - uint64(len(r.buf)) + uint64(i))
	continuous := (len(r.buf) > 0 && id.Compare(r.buf[0].id) >= 0) || (!r.lastEvicted.IsZero() && id == r.lastEvicted)
	if continuous {
		return c, nil
	}
	return c, &gapInfo{Requested: id.String(), Oldest: r.oldestLocked()}
}

// unknown returns the cursor and gap for a client that sent a position that
// is not an event id: the whole window follows the gap frame.
func (r *ring) unknown(requested string) (cursor, *gapInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evictLocked(r.now())
	return cursor(r.next - uint64(len(r.buf))), &gapInfo{Requested: requested, Oldest: r.oldestLocked()}
}

// live returns the cursor of the next event to arrive.
func (r *ring) live() cursor {
	r.mu.Lock()
	defer r.mu.Unlock()
	return cursor(r.next)
}

// read returns the retained events from c on and the cursor after them;
// missed is set when the window has moved past c (the events in between
// are gone), and wake is closed when more events arrive.
func (r *ring) read(c cursor) (events []stored, after cursor, missed bool, wake <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evictLocked(r.now())
	first := r.next - uint64(len(r.buf))
	if uint64(c) < first {
		missed, c = true, cursor(first)
	}
	// A copy: eviction clears the slots of the shared array, and the
	// caller writes these out without the lock. The frames themselves
	// are never modified.
	events = append([]stored(nil), r.buf[uint64(c)-first:]...)
	return events, cursor(r.next), missed, r.wake
}

// oldest is the id of the oldest retained event, or nil when none is.
func (r *ring) oldest() *string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.oldestLocked()
}

func (r *ring) oldestLocked() *string {
	for _, s := range r.buf {
		if !s.gap {
			return idPtr(s.id)
		}
	}
	return nil
}

// changeFrame renders an event as an SSE frame. The envelope is compact
// JSON and so one line; a payload with a line break is split over several
// data lines, which a client joins back with "\n".
func changeFrame(e pluginkit.Event) []byte {
	var b bytes.Buffer
	b.Grow(len(e.Payload) + 48)
	b.WriteString("id: ")
	b.WriteString(e.ID.String())
	b.WriteString("\nevent: change\n")
	writeData(&b, e.Payload)
	return b.Bytes()
}

func gapFrame(g *gapInfo) []byte {
	data, _ := json.Marshal(g)
	var b bytes.Buffer
	b.WriteString("event: gap\n")
	writeData(&b, data)
	return b.Bytes()
}

func writeData(b *bytes.Buffer, data []byte) {
	for {
		line, rest, more := bytes.Cut(data, []byte("\n"))
		b.WriteString("data: ")
		b.Write(bytes.TrimSuffix(line, []byte("\r")))
		b.WriteByte('\n')
		if !more {
			break
		}
		data = rest
	}
	b.WriteByte('\n')
}
