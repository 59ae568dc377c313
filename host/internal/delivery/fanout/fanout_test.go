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

// Each sink's queue holds the event in the format the sink chose: its key,
// old key and payload, counted in the queue's bytes; the envelope for the
// others.
func TestQueueHoldsTheSinksFormat(t *testing.T) {
	tracker := ack.New([]ack.SinkSpec{{ID: "env", Durable: true}, {ID: "dbz", Durable: true}}, 0)
	plain, dbz := NewQueue(10, true), NewQueue(10, true)
	dbz.Format = 1
	f := New(tracker, []*Queue{plain, dbz})
	ev := change.Event{
		Event:   pluginkit.Event{ID: pluginkit.EventID{CommitLSN: 0x10}, Key: []byte(`{"id":2}`), Payload: []byte(`{"op":"update"}`)},
		OldKey:  []byte(`{"id":1}`),
		Formats: []change.Encoded{{Key: []byte(`{"k":2}`), OldKey: []byte(`{"k":1}`), Payload: []byte(`{"op":"u","longer":true}`)}},
	}
	if err := f.Event(context.Background(), ev, func() {}); err != nil {
		t.Fatal(err)
	}
	p, d := <-plain.C, <-dbz.C
	if string(p.Event.Key) != `{"id":2}` || string(p.OldKey) != `{"id":1}` || string(p.Event.Payload) != `{"op":"update"}` {
		t.Errorf("envelope sink got key %s old %s payload %s", p.Event.Key, p.OldKey, p.Event.Payload)
	}
	if string(d.Event.Key) != `{"k":2}` || string(d.OldKey) != `{"k":1}` || string(d.Event.Payload) != `{"op":"u","longer":true}` {
		t.Errorf("debezium sink got key %s old %s payload %s", d.Event.Key, d.OldKey, d.Event.Payload)
	}
	if got, want := dbz.bytes.Load(), int64(len(ev.Formats[0].Payload)); got != want {
		t.Errorf("debezium queue counts %d bytes, want %d", got, want)
	}
	if got, want := plain.bytes.Load(), int64(len(ev.Payload)); got != want {
		t.Errorf("envelope queue counts %d bytes, want %d", got, want)
	}
}
