package isolate

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/host/internal/delivery/fanout"
	"github.com/walcast/walcast/pluginkit"
)

func eid(lsn, idx uint64) pluginkit.EventID { return pluginkit.EventID{CommitLSN: lsn, Index: idx} }

func newBounded() (catchupConsumer, *fanout.Queue) {
	tr := ack.New([]ack.SinkSpec{{ID: "s", Durable: true}}, 0)
	q := fanout.NewQueue(16, true)
	c := &catchupStream{tracker: tr, queue: q}
	return catchupConsumer{Fanout: fanout.New(tr, []*fanout.Queue{q}), stream: c}, q
}

// The catch-up stream hands over everything up to the boundary and holds
// the first event past it until the rejoin completes or is called off.
func TestBoundedHoldsEventsPastTheBoundary(t *testing.T) {
	b, q := newBounded()
	ctx := context.Background()
	idle := func() {}
	b.stream.setBoundary(eid(200, 1))
	for _, id := range []pluginkit.EventID{eid(100, 0), eid(200, 0), eid(200, 1)} {
		if err := b.Event(ctx, change.Event{Event: pluginkit.Event{ID: id}}, idle); err != nil {
			t.Fatal(err)
		}
	}
	if b.stream.reached.Load() {
		t.Fatal("reached before anything past the boundary was seen")
	}
	held := make(chan error, 1)
	go func() { held <- b.Event(ctx, change.Event{Event: pluginkit.Event{ID: eid(200, 2)}}, idle) }()
	waitUntil(t, b.stream.reached.Load)
	select {
	case err := <-held:
		t.Fatalf("event past the boundary handed over (err %v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	if len(q.C) != 3 {
		t.Fatalf("queue holds %d events, want 3", len(q.C))
	}
	// Called off: the stream goes on.
	b.stream.boundary.Store(nil)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if len(q.C) != 4 {
		t.Fatalf("queue holds %d events after the boundary was cleared, want 4", len(q.C))
	}
}

func TestBoundedReachedByCommitAndIdle(t *testing.T) {
	b, _ := newBounded()
	ctx := context.Background()
	b.stream.setBoundary(eid(200, 0))
	b.Event(ctx, change.Event{Event: pluginkit.Event{ID: eid(200, 0)}}, func() {})
	b.Commit(100, 150) // an earlier transaction's commit cannot be
	if b.stream.reached.Load() {
		t.Fatal("reached by the commit of an earlier transaction")
	}
	b.Commit(200, 250)
	if !b.stream.reached.Load() {
		t.Fatal("not reached by the commit of the boundary's transaction")
	}

	b, _ = newBounded()
	b.stream.setBoundary(eid(200, 3))
	b.AdvanceIdle(200)
	if b.stream.reached.Load() {
		t.Fatal("reached by a keepalive at the boundary's commit LSN")
	}
	b.AdvanceIdle(201)
	if !b.stream.reached.Load() {
		t.Fatal("not reached by a keepalive past the boundary's commit")
	}

	// A stream that already committed past the boundary reaches it at once.
	b, _ = newBounded()
	b.Commit(300, 350)
	b.stream.setBoundary(eid(200, 0))
	if !b.stream.reached.Load() {
		t.Fatal("boundary below what was already handed over not reached")
	}
	b, _ = newBounded()
	b.stream.done.Store(499) // slot confirmed at 500
	b.stream.setBoundary(eid(500, 0))
	if b.stream.reached.Load() {
		t.Fatal("boundary at the slot's confirmed position reached before its transaction")
	}
}

func TestBoundaryOf(t *testing.T) {
	if got := boundaryOf(eid(7, 2), 100); got != eid(7, 2) {
		t.Fatalf("boundaryOf(last) = %v", got)
	}
	// Nothing handed over since the pipeline started at 100: every
	// transaction that committed before 100 is the catch-up stream's.
	got := boundaryOf(pluginkit.EventID{}, 100)
	if got != (pluginkit.EventID{CommitLSN: 99, Index: math.MaxUint64}) || eid(100, 0).Compare(got) <= 0 || eid(99, 5).Compare(got) > 0 {
		t.Fatalf("boundaryOf(zero, 100) = %v", got)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}
