package fanout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Item is one event on its way to one sink.
type Item struct {
	Seq   ack.Seq
	Event cdc.Event
	// OldKey is the key before an update that changed it (change.Event).
	OldKey []byte
	// GapBefore: events were dropped for this sink just before this one
	// (its non-durable queue was full). The sink is told, so that it can
	// tell its own clients (pluginkit.GapBefore).
	GapBefore bool
}

// Queue is one sink's inbox.
type Queue struct {
	C chan Item
	// Sink is the sink's id: a backfill's read event for other sinks is
	// resolved for this one without being queued.
	Sink string
	// Format is the output format the sink chose: 0 for the envelope, i
	// for change.Event.Formats[i-1]. Its key, old key and payload replace
	// the envelope's in what the queue holds, so the sink's scheduler
	// orders and parks rows by the key it delivers.
	Format  int
	durable bool
	dropped atomic.Int64
	gap     bool // a drop not yet reported; touched by the fanout goroutine only

	// The queue is bounded in payload bytes too, so that rows of megabytes
	// cannot turn a queue of a thousand events into gigabytes.
	bytes    atomic.Int64
	maxBytes int64
	space    chan struct{} // signalled by Took

	// blockedSince is when the fan-out started waiting for room in this
	// queue (Unix nanoseconds, 0 when it is not waiting): how long the
	// sink has held the whole stream back.
	blockedSince atomic.Int64
	// from: events of lower seqs are not this queue's (it was installed
	// by a rejoin after they were added). gone is closed when the queue is
	// detached; a fan-out waiting for room gives up on it.
	from ack.Seq
	gone chan struct{}
}

// DefaultQueueBytes bounds the payload bytes one sink's queue holds.
const DefaultQueueBytes = 32 << 20

// NewQueue returns a queue holding up to capacity events and
// DefaultQueueBytes of payload (at least one event, however large).
func NewQueue(capacity int, durable bool) *Queue {
	return &Queue{C: make(chan Item, capacity), durable: durable, maxBytes: DefaultQueueBytes, space: make(chan struct{}, 1), gone: make(chan struct{})}
}

// BlockedFor is how long the fan-out has been waiting for room in this
// queue, 0 when it is not waiting.
func (q *Queue) BlockedFor(now time.Time) time.Duration {
	at := q.blockedSince.Load()
	if at == 0 {
		return 0
	}
	return now.Sub(time.Unix(0, at))
}

// Took is called by the queue's consumer for every item it receives from
// C: it frees the item's bytes and wakes a fan-out waiting for room.
func (q *Queue) Took(it Item) {
	q.bytes.Add(-int64(len(it.Event.Payload)))
	select {
	case q.space <- struct{}{}:
	default:
	}
}

// roomFor reports whether n more payload bytes fit; an empty queue takes
// any event.
func (q *Queue) roomFor(n int64) bool {
	b := q.bytes.Load()
	return b <= 0 || b+n <= q.maxBytes
}

// waitRoom blocks until n bytes fit, calling idle every change.IdleEvery
// so that the capture loop keeps answering the server.
// It returns errGone when the queue is detached meanwhile.
func (q *Queue) waitRoom(ctx context.Context, n int64, idle func()) error {
	t := time.NewTicker(change.IdleEvery)
	defer t.Stop()
	for !q.roomFor(n) {
		select {
		case <-q.space:
		case <-t.C:
			idle()
		case <-q.gone:
			return errGone
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// send puts it in the queue, waiting like waitRoom.
func (q *Queue) send(ctx context.Context, it Item, idle func()) error {
	t := time.NewTicker(change.IdleEvery)
	defer t.Stop()
	for {
		select {
		case q.C <- it:
			return nil
		case <-t.C:
			idle()
		case <-q.gone:
			return errGone
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

var errGone = errors.New("queue detached")

// Dropped is how many events a non-durable queue dropped because it was full.
func (q *Queue) Dropped() int64 { return q.dropped.Load() }

// Fanout is the consumer of a capture's stream (it has the methods
// capture.Consumer asks for; the daemon hands it to capture.New).
type Fanout struct {
	tracker *ack.Tracker
	// queues[i] belongs to the tracker's sink i; nil while the sink is
	// detached. Detach and Rejoin swap them under the tracker's lock.
	queues []atomic.Pointer[Queue]
	events atomic.Int64
}

// Events is how many events were fanned out (safe from any goroutine).
func (f *Fanout) Events() int64 { return f.events.Load() }

// New returns a fan-out over queues; queues[i] belongs to the tracker's
// sink i.
func New(tracker *ack.Tracker, queues []*Queue) *Fanout {
	f := &Fanout{tracker: tracker, queues: make([]atomic.Pointer[Queue], len(queues))}
	for i, q := range queues {
		f.queues[i].Store(q)
	}
	return f
}

// Queue is sink i's queue now, nil while it is detached.
func (f *Fanout) Queue(i int) *Queue { return f.queues[i].Load() }

// Detach stops queueing events for sink i and stops it holding the slot
// back (ack.Tracker.Detach); a fan-out waiting for room in its queue gives
// up on it at once. What is in the queue stays there for its consumer to
// drop. The caller keeps the sink's position elsewhere first.
func (f *Fanout) Detach(i int) {
	q := f.queues[i].Swap(nil)
	f.tracker.Detach(i)
	if q != nil {
		close(q.gone)
	}
}

// Rejoin queues events for sink i again in q, from the next event added
// on, at position. It returns the last event added before: everything up
// to it is the caller's to deliver.
func (f *Fanout) Rejoin(i int, q *Queue, position cdc.EventID) cdc.EventID {
	_, last := f.tracker.Rejoin(i, position, func(from ack.Seq) {
		q.from = from
		f.queues[i].Store(q)
	})
	return last
}

// Event registers ev with the tracker and queues it for every sink.
func (f *Fanout) Event(ctx context.Context, ev change.Event, idle func()) error {
	seq, err := f.tracker.AddEvent(ev.ID, len(ev.Payload), time.Now())
	if err != nil {
		return fmt.Errorf("fan out event: %w", err)
	}
	for i := range f.queues {
		q := f.queues[i].Load()
		if q == nil || seq < q.from {
			continue // detached, or rejoined after this event was added
		}
		if ev.Sinks != nil && !slices.Contains(ev.Sinks, q.Sink) {
			// A backfill for other sinks: resolved here, never queued.
			f.tracker.Resolve(i, seq)
			continue
		}
		item := Item{Seq: seq, Event: ev.Event, OldKey: ev.OldKey, GapBefore: q.gap}
		if q.Format > 0 && q.Format <= len(ev.Formats) {
			enc := &ev.Formats[q.Format-1]
			item.Event.Key, item.Event.Payload, item.OldKey = enc.Key, enc.Payload, enc.OldKey
		}
		n := int64(len(item.Event.Payload))
		if q.roomFor(n) {
			q.bytes.Add(n)
			select {
			case q.C <- item:
				q.gap = false
				continue
			default:
			}
			q.bytes.Add(-n)
		}
		if !q.durable {
			q.dropped.Add(1)
			q.gap = true
			f.tracker.Resolve(i, seq)
			continue
		}
		if err := f.wait(ctx, q, item, n, idle); err != nil {
			if errors.Is(err, errGone) {
				continue // detached while the stream waited for it
			}
			return err
		}
	}
	f.events.Add(1)
	return nil
}

// wait queues item in the durable queue q, waiting for room.
func (f *Fanout) wait(ctx context.Context, q *Queue, item Item, n int64, idle func()) error {
	q.blockedSince.Store(time.Now().UnixNano())
	defer q.blockedSince.Store(0)
	if err := q.waitRoom(ctx, n, idle); err != nil {
		return err
	}
	q.bytes.Add(n)
	if err := q.send(ctx, item, idle); err != nil {
		q.bytes.Add(-n)
		return err
	}
	return nil
}

// Commit records a transaction's end.
func (f *Fanout) Commit(commitLSN, endLSN uint64) { f.tracker.Commit(endLSN) }

// Flush is the tracker's flush position: what capture may confirm.
func (f *Fanout) Flush() uint64 { return f.tracker.Flush() }

// AdvanceIdle moves the tracker's flush position to a keepalive's WAL end
// when nothing is in flight (ack.Tracker.AdvanceIdle).
func (f *Fanout) AdvanceIdle(walEnd uint64) bool { return f.tracker.AdvanceIdle(walEnd) }
