package ack

import (
	"cmp"
	"fmt"
	"sync"
	"time"

	"github.com/walcast/walcast/pluginkit/cdc"
)

// Seq numbers events in the order they were added. Every sink sees every
// event, so one sequence serves all sinks.
type Seq uint64

// SinkSpec declares a sink to the tracker.
type SinkSpec struct {
	ID string
	// Durable sinks hold the slot back; non-durable ones never do.
	Durable bool
}

// Tracker is safe for concurrent use: capture adds events and commits from
// one goroutine while each sink's scheduler resolves from its own.
type Tracker struct {
	mu    sync.Mutex
	sinks []*sinkState
	next  Seq // seq of the next event to be added
	// txs holds committed transactions, each marked by the seq one past
	// its last event: it is released once every durable sink's first
	// unresolved seq reaches that mark.
	txs     *Releases[Seq]
	lastAdd cdc.EventID
	// committed is the tracker's next seq at the last Commit: events at or
	// above it belong to a transaction whose commit has not been seen.
	committed Seq
	changed   bool // some position moved since the last PositionsToSave call
}

type sinkState struct {
	SinkSpec
	low      Seq    // first unresolved seq; all below are resolved
	ring     []slot // ring[seq % len] for seq in [low, next)
	position cdc.EventID
	// open and openBytes count the events in [low, next) not resolved
	// yet, and their payload bytes: the sink's backlog.
	open      int
	openBytes int64
	// detached: the sink catches up on a slot of its own (package
	// isolate); this tracker neither counts events for it nor lets it
	// hold the flush position, and its position stays where it was.
	detached bool
}

type slot struct {
	id    cdc.EventID
	done  bool
	bytes int64
	at    int64 // unix nanoseconds when the event was added
}

// New returns a tracker for the given sinks. start is the flush position
// already confirmed to PostgreSQL (the slot's confirmed_flush_lsn), so that
// Flush never reports less than what the server already has.
func New(sinks []SinkSpec, start uint64) *Tracker {
	t := &Tracker{txs: NewReleases(start, cmp.Compare[Seq])}
	for _, s := range sinks {
		t.sinks = append(t.sinks, &sinkState{SinkSpec: s, ring: make([]slot, 1024)})
	}
	return t
}

// Sinks returns the number of sinks; sink indexes run from 0 to Sinks()-1
// in the order given to New.
func (t *Tracker) Sinks() int { return len(t.sinks) }

// Add registers the next event of the stream for every sink and returns
// its sequence number. Ids must be added in increasing order.
func (t *Tracker) Add(id cdc.EventID) (Seq, error) { return t.AddEvent(id, 0, time.Time{}) }

// AddEvent is Add for an event of the given payload size read from the
// slot at the given time, which Backlog reports while it is unresolved.
func (t *Tracker) AddEvent(id cdc.EventID, bytes int, at time.Time) (Seq, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.lastAdd.IsZero() && id.Compare(t.lastAdd) <= 0 {
		return 0, fmt.Errorf("event %s added after %s: ids must increase", id, t.lastAdd)
	}
	seq := t.next
	var ns int64
	if !at.IsZero() {
		ns = at.UnixNano()
	}
	for _, s := range t.sinks {
		if s.detached {
			s.low = seq + 1
			continue
		}
		if Seq(len(s.ring)) <= seq-s.low {
			s.grow()
		}
		s.ring[int(seq%Seq(len(s.ring)))] = slot{id: id, bytes: int64(bytes), at: ns}
		s.open++
		s.openBytes += int64(bytes)
	}
	t.next++
	t.lastAdd = id
	return seq, nil
}

// Commit records that the transaction whose events were just added ended
// at endLSN (pglogrepl's Commit.TransactionEndLSN). Once all of its events
// are resolved for every durable sink, Flush reports endLSN.
func (t *Tracker) Commit(endLSN uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.txs.Commit(t.next, endLSN)
	t.committed = t.next
	t.release()
}

// Resolve marks events as resolved for sink i. Resolving an event twice,
// or one that was never added, is a no-op.
func (t *Tracker) Resolve(i int, seqs ...Seq) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sinks[i]
	if s.detached {
		return
	}
	for _, seq := range seqs {
		if seq < s.low || seq >= t.next {
			continue
		}
		sl := &s.ring[int(seq%Seq(len(s.ring)))]
		if !sl.done {
			sl.done = true
			s.open--
			s.openBytes -= sl.bytes
		}
	}
	moved := false
	for s.low < t.next {
		sl := &s.ring[int(s.low%Seq(len(s.ring)))]
		if !sl.done {
			break
		}
		if sl.id.Compare(s.position) > 0 {
			s.position = sl.id
		}
		*sl = slot{}
		s.low++
		moved = true
	}
	if moved {
		t.changed = true
		if s.Durable {
			t.release()
		}
	}
}

// release pops every committed transaction that every durable sink has
// fully resolved. Caller holds mu.
func (t *Tracker) release() {
	t.txs.Release(t.durableLow())
}

// durableLow is the first seq some durable sink has not resolved (next when
// every one has resolved everything). Caller holds mu.
func (t *Tracker) durableLow() Seq {
	low := t.next
	for _, s := range t.sinks {
		if s.Durable && !s.detached && s.low < low {
			low = s.low
		}
	}
	return low
}

// Flush is the LSN that may be confirmed to PostgreSQL: the end LSN of the
// last transaction every durable sink has resolved, or the start position.
func (t *Tracker) Flush() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.txs.Flush()
}

// AdvanceIdle moves the flush position to walEnd — a keepalive's server WAL
// end — when nothing is in flight: every added event resolved by every
// durable sink and every committed transaction released. The caller must
// also know that no transaction is open on the stream. It reports whether
// the position moved.
func (t *Tracker) AdvanceIdle(walEnd uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.txs.AdvanceIdle(walEnd, t.committed == t.next && t.durableLow() == t.next)
}

// Idle reports whether every added event is resolved for every sink.
func (t *Tracker) Idle() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.sinks {
		if s.low < t.next {
			return false
		}
	}
	return true
}

// Pending returns how many added events sink i has not resolved.
func (t *Tracker) Pending(i int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return int(t.next - t.sinks[i].low)
}

// Ahead returns how many events sink i resolved above its position: out
// of order, behind an earlier event it has not resolved. A checkpoint is
// one position per sink, so these are delivered again by whoever streams
// next if the pipeline stops before the gap closes.
func (t *Tracker) Ahead(i int) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sinks[i]
	return int(t.next-s.low) - s.open
}

// Backlog describes sink i's backlog: the events added and not resolved yet
// (delivered, filtered, skipped, parked or dropped), their payload bytes,
// and when the oldest of them was added (zero when there is none, or it
// was added without a time).
func (t *Tracker) Backlog(i int) (events int, bytes int64, oldest time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sinks[i]
	if s.low < t.next {
		// The slot at low is unresolved: Resolve moves low past every
		// resolved one.
		if ns := s.ring[int(s.low%Seq(len(s.ring)))].at; ns != 0 {
			oldest = time.Unix(0, ns)
		}
	}
	return s.open, s.openBytes, oldest
}

// Detach stops counting events for sink i: every event added so far is
// forgotten for it, later ones are not recorded, and it no longer holds
// the flush position back. Its position stays where it was. The caller
// must keep what the sink still needs elsewhere first (a catch-up slot
// copied while the sink still held this tracker's position).
func (t *Tracker) Detach(i int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sinks[i]
	if s.detached {
		return
	}
	s.detached = true
	clear(s.ring)
	s.low, s.open, s.openBytes = t.next, 0, 0
	t.release()
}

// Rejoin counts sink i again from the next event added on, at position,
// and returns that event's seq and the last event added
// before it: everything up to last is the caller's to deliver some other
// way. joined, when set, runs under the tracker's lock before any later
// event is added (the fan-out installs the sink's queue there).
func (t *Tracker) Rejoin(i int, position cdc.EventID, joined func(from Seq)) (from Seq, last cdc.EventID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sinks[i]
	s.detached = false
	clear(s.ring)
	s.low, s.open, s.openBytes = t.next, 0, 0
	s.position = position
	t.changed = true
	if joined != nil {
		joined(t.next)
	}
	return t.next, t.lastAdd
}

// Detached reports whether sink i is detached.
func (t *Tracker) Detached(i int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sinks[i].detached
}

// LastAdded is the id of the last event added (zero before the first).
func (t *Tracker) LastAdded() cdc.EventID {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastAdd
}

// RaisePosition raises sink i's position to id when id is higher: seeded
// with the sink's stored checkpoint, the checkpoint store never writes a
// lower one before the first replayed event above it is resolved.
func (t *Tracker) RaisePosition(i int, id cdc.EventID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id.Compare(t.sinks[i].position) > 0 {
		t.sinks[i].position = id
	}
}

// PositionsToSave returns every sink's position for the checkpoint
// writer, indexed like the sinks given to New, and whether any moved
// since the previous call.
func (t *Tracker) PositionsToSave() ([]cdc.EventID, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	changed := t.changed
	t.changed = false
	return t.positions(), changed
}

// Positions returns every sink's position like PositionsToSave, for
// readers other than the checkpoint writer: it leaves the moved flag to
// that writer.
func (t *Tracker) Positions() []cdc.EventID {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.positions()
}

// positions copies every sink's position. Caller holds mu.
func (t *Tracker) positions() []cdc.EventID {
	out := make([]cdc.EventID, len(t.sinks))
	for i, s := range t.sinks {
		out[i] = s.position
	}
	return out
}

// MarkUnsaved makes the next PositionsToSave call report a move, so that
// a failed checkpoint write is retried.
func (t *Tracker) MarkUnsaved() {
	t.mu.Lock()
	t.changed = true
	t.mu.Unlock()
}

// grow doubles the ring, keeping seq → index mapping for [low, next).
// Caller holds mu; next is the tracker's next seq at the time.
func (s *sinkState) grow() {
	old := s.ring
	ring := make([]slot, 2*len(old))
	for i := range old {
		seq := s.low + Seq(i)
		ring[int(seq%Seq(len(ring)))] = old[int(seq%Seq(len(old)))]
	}
	s.ring = ring
}
