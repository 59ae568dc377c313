package fanout

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/pluginkit"
)

// A non-durable queue that was full drops events and flags the next event
// it takes, so the sink can tell its clients; a durable queue never drops.
func TestDroppedEventsFlagTheNextOne(t *testing.T) {
	tracker := ack.New([]ack.SinkSpec{{ID: "browser"}}, 0)
	q := NewQueue(1, false)
	f := New(tracker, []*Queue{q})
	ctx := context.Background()
	ev := func(i uint64) change.Event {
		return change.Event{Event: pluginkit.Event{ID: pluginkit.EventID{CommitLSN: 0x10, Index: i}}}
	}
	for i := range uint64(3) { // the queue holds one: two are dropped
		if err := f.Event(ctx, ev(i), func() {}); err != nil {
			t.Fatal(err)
		}
	}
	if q.Dropped() != 2 {
		t.Fatalf("dropped %d, want 2", q.Dropped())
	}
	if it := <-q.C; it.Event.ID.Index != 0 || it.GapBefore {
		t.Fatalf("first item %+v: want event 0 without a gap", it)
	}
	if err := f.Event(ctx, ev(3), func() {}); err != nil {
		t.Fatal(err)
	}
	if it := <-q.C; it.Event.ID.Index != 3 || !it.GapBefore {
		t.Fatalf("item after the drops %+v: want event 3 flagged", it)
	}
	if err := f.Event(ctx, ev(4), func() {}); err != nil {
		t.Fatal(err)
	}
	if it := <-q.C; it.GapBefore {
		t.Fatal("the flag stayed set after it was delivered")
	}
}

// A durable queue is bounded in bytes: the fan-out waits (answering the
// server meanwhile) until the consumer takes an event, and an empty queue
// takes an event of any size.
func TestQueueIsBoundedInBytes(t *testing.T) {
	tracker := ack.New([]ack.SinkSpec{{ID: "hook", Durable: true}}, 0)
	q := NewQueue(100, true)
	q.maxBytes = 1500
	f := New(tracker, []*Queue{q})
	ev := func(i uint64, size int) change.Event {
		return change.Event{Event: pluginkit.Event{ID: pluginkit.EventID{CommitLSN: 0x10, Index: i}, Payload: make([]byte, size)}}
	}
	ctx := context.Background()
	if err := f.Event(ctx, ev(0, 5000), func() {}); err != nil { // larger than the bound, queue empty
		t.Fatal(err)
	}
	var idles atomic.Int32
	done := make(chan error, 1)
	go func() { done <- f.Event(ctx, ev(1, 1000), func() { idles.Add(1) }) }()
	select {
	case err := <-done:
		t.Fatalf("Event returned (%v) while the queue held more than its bytes", err)
	case <-time.After(500 * time.Millisecond):
	}
	if idles.Load() == 0 {
		t.Error("the fan-out did not answer the server while waiting for room")
	}
	q.Took(<-q.C)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the fan-out did not go on once the consumer took an event")
	}
	if it := <-q.C; it.Event.ID.Index != 1 {
		t.Fatalf("got event %d", it.Event.ID.Index)
	}
}
