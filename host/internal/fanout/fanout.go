// Package fanout gives each sink its own bounded queue and copies every
// captured event into all of them.
//
// A full queue of a durable sink pauses the stream (backpressure): the
// capture loop blocks here, answering the server meanwhile through the idle
// callback, and PostgreSQL keeps the changes in the slot. A non-durable
// sink never holds the stream back: when its queue is full the event is
// dropped for that sink and counted.
//
// Capture hands over every event once, reconnects included, so fanout
// needs no deduplication of its own.
package fanout

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/walcast/walcast/host/internal/ack"
	"github.com/walcast/walcast/host/internal/capture"
	"github.com/walcast/walcast/pluginkit"
)

// Item is one event on its way to one sink.
type Item struct {
	Seq   ack.Seq
	Event pluginkit.Event
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
	Sink    string
	durable bool
	dropped atomic.Int64
	gap     bool // a drop not yet reported; touched by the fanout goroutine only

	// The queue is bounded in payload bytes too, so that rows of megabytes
	// cannot turn a queue of a thousand events into gigabytes.
	bytes    atomic.Int64
	maxBytes int64
	space    chan struct{} // signalled by Took
}

// DefaultQueueBytes bounds the payload bytes one sink's queue holds.
const DefaultQueueBytes = 32 << 20

// NewQueue returns a queue holding up to capacity events and
// DefaultQueueBytes of payload (at least one event, however large).
func NewQueue(capacity int, durable bool) *Queue {
	return &Queue{C: make(chan Item, capacity), durable: durable, maxBytes: DefaultQueueBytes, space: make(chan struct{}, 1)}
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

// waitRoom blocks until n bytes fit, calling idle every capture.IdleEvery
// so that the capture loop keeps answering the server.
func (q *Queue) waitRoom(ctx context.Context, n int64, idle func()) error {
	t := time.NewTicker(capture.IdleEvery)
	defer t.Stop()
	for !q.roomFor(n) {
		select {
		case <-q.space:
		case <-t.C:
			idle()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Dropped is how many events a non-durable queue dropped because it was full.
func (q *Queue) Dropped() int64 { return q.dropped.Load() }

// Fanout implements capture.Consumer.
type Fanout struct {
	tracker *ack.Tracker
	queues  []*Queue // indexed like the tracker's sinks
	events  atomic.Int64
}

// Events is how many events were fanned out (safe from any goroutine).
func (f *Fanout) Events() int64 { return f.events.Load() }

var _ capture.Consumer = (*Fanout)(nil)

// New returns a fan-out over queues; queues[i] belongs to the tracker's
// sink i.
func New(tracker *ack.Tracker, queues []*Queue) *Fanout {
	return &Fanout{tracker: tracker, queues: queues}
}

// Event registers ev with the tracker and queues it for every sink.
func (f *Fanout) Event(ctx context.Context, ev pluginkit.Event, idle func()) error {
	seq, err := f.tracker.AddEvent(ev.ID, len(ev.Payload), time.Now())
	if err != nil {
		return fmt.Errorf("fan out event: %w", err)
	}
	n := int64(len(ev.Payload))
	for i, q := range f.queues {
		if ev.Sinks != nil && !slices.Contains(ev.Sinks, q.Sink) {
			f.tracker.Resolve(i, seq)
			continue
		}
		item := Item{Seq: seq, Event: ev, GapBefore: q.gap}
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
		if err := q.waitRoom(ctx, n, idle); err != nil {
			return err
		}
		q.bytes.Add(n)
		if err := capture.Send(ctx, q.C, item, idle); err != nil {
			q.bytes.Add(-n)
			return err
		}
	}
	f.events.Add(1)
	return nil
}

// Commit records a transaction's end.
func (f *Fanout) Commit(commitLSN, endLSN uint64) { f.tracker.Commit(endLSN) }

// Flush implements capture.Consumer.
func (f *Fanout) Flush() uint64 { return f.tracker.Flush() }

// AdvanceIdle implements capture.Consumer.
func (f *Fanout) AdvanceIdle(walEnd uint64) bool { return f.tracker.AdvanceIdle(walEnd) }
