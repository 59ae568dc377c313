package fanout

import (
	"context"
	"testing"

	"github.com/walcast/walcast/host/ack"
	"github.com/walcast/walcast/pluginkit"
)

// A non-durable queue that was full drops events and flags the next event
// it takes, so the sink can tell its clients; a durable queue never drops.
func TestDroppedEventsFlagTheNextOne(t *testing.T) {
	tracker := ack.New([]ack.SinkSpec{{ID: "browser"}}, 0)
	q := NewQueue(1, false)
	f := New(tracker, []*Queue{q})
	ctx := context.Background()
	ev := func(i uint64) pluginkit.Event {
		return pluginkit.Event{ID: pluginkit.EventID{CommitLSN: 0x10, Index: i}}
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
