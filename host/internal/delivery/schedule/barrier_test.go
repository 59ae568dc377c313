package schedule

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/delivery/fanout"
	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/pluginkit"
)

// tableSink checks the truncate barrier as a sink sees it: a batch with a
// truncate of T holds no other event of T, and no other batch with T is
// in flight at the same time.
type tableSink struct {
	t        *testing.T
	mu       sync.Mutex
	flying   map[string]int // table → batches in flight holding it
	trunc    map[string]bool
	got      []pluginkit.Event
	lat      *rand.Rand
	behave   func(evs []pluginkit.Event) error
	attempts int
}

func (f *tableSink) Deliver(_ context.Context, b attempt.Batch) (attempt.Result, error) {
	evs := b.Events
	tables := map[string]int{}
	truncs := map[string]bool{}
	for _, e := range evs {
		tables[e.Table]++
		if e.Op == pluginkit.OpTruncate || e.Op == pluginkit.OpSchema {
			truncs[e.Table] = true
		}
	}
	f.mu.Lock()
	f.attempts++
	for tb, n := range tables {
		if truncs[tb] && (n > 1 || f.flying[tb] > 0) {
			f.t.Errorf("truncate of %s delivered with %d other events of its table in the batch and %d batches of it in flight", tb, n-1, f.flying[tb])
		}
		if f.trunc[tb] {
			f.t.Errorf("an event of %s in flight while its truncate is", tb)
		}
		f.flying[tb]++
	}
	for tb := range truncs {
		f.trunc[tb] = true
	}
	d := time.Duration(f.lat.IntN(2000)) * time.Microsecond
	f.mu.Unlock()
	time.Sleep(d)
	var err error
	if f.behave != nil {
		err = f.behave(evs)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for tb := range tables {
		f.flying[tb]--
	}
	for tb := range truncs {
		f.trunc[tb] = false
	}
	if err != nil {
		return attempt.Result{}, err
	}
	f.got = append(f.got, evs...)
	return attempt.Result{}, nil
}

func (f *tableSink) delivered() []pluginkit.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]pluginkit.Event(nil), f.got...)
}

// pushEvents commits one transaction of the given events.
func (h *harness) pushEvents(evs ...pluginkit.Event) {
	h.lsn += 0x100
	for i, ev := range evs {
		ev.ID = pluginkit.EventID{CommitLSN: h.lsn, Index: uint64(i)}
		ev.Schema = "public"
		if ev.Payload == nil {
			ev.Payload = []byte(`{}`)
		}
		seq, err := h.tracker.Add(ev.ID)
		if err != nil {
			h.t.Fatal(err)
		}
		h.queue.C <- fanout.Item{Seq: seq, Event: ev}
		h.last = ev.ID
	}
	h.tracker.Commit(h.lsn + 8)
}

func rowEv(table string, op pluginkit.Op, id int) pluginkit.Event {
	return pluginkit.Event{Table: table, Op: op, Key: fmt.Appendf(nil, `{"id":%d}`, id)}
}

func truncEv(table string) pluginkit.Event {
	return pluginkit.Event{Table: table, Op: pluginkit.OpTruncate, Key: []byte("null")}
}

// checkTableOrder fails when an event of a table was delivered on the
// wrong side of one of its table's truncates or schema events.
func checkTableOrder(t *testing.T, evs []pluginkit.Event) {
	t.Helper()
	for i, tr := range evs {
		if tr.Op != pluginkit.OpTruncate && tr.Op != pluginkit.OpSchema {
			continue
		}
		for j, e := range evs {
			if e.Table != tr.Table || j == i {
				continue
			}
			if (j < i) != (e.ID.Compare(tr.ID) < 0) {
				t.Fatalf("%s event %s delivered on the wrong side of truncate %s", e.Table, e.ID, tr.ID)
			}
		}
	}
}

// A truncate waits for every earlier event of its table and holds back
// every later one, with many lanes and small batches; another table keeps
// flowing.
func TestTruncateIsABarrierForItsTable(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	sink := &tableSink{t: t, flying: map[string]int{}, trunc: map[string]bool{}, lat: rand.New(rand.NewPCG(9, 10))}
	h := start(t, Config{BatchSize: 5, MaxInFlight: 8, RetryBase: time.Millisecond}, sink)
	n := 0
	for tx := 0; tx < 300; tx++ {
		var evs []pluginkit.Event
		for range 1 + r.IntN(6) {
			tb := []string{"t", "u", "v"}[r.IntN(3)]
			evs = append(evs, rowEv(tb, pluginkit.OpUpdate, r.IntN(50)))
		}
		if r.IntN(8) == 0 {
			// A multi-table TRUNCATE: one event per table, in a row.
			evs = append(evs, truncEv("t"), truncEv("u"))
		}
		h.pushEvents(evs...)
		n += len(evs)
	}
	h.waitResolved(30 * time.Second)
	got := sink.delivered()
	if len(got) != n {
		t.Fatalf("delivered %d of %d events", len(got), n)
	}
	checkRowOrder(t, got)
	checkTableOrder(t, got)
}

// A schema event is a barrier for its table like a truncate: every row
// in the old shape is resolved before it goes, none in the new shape
// goes before it is resolved; other tables keep flowing.
func TestSchemaEventIsABarrierForItsTable(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 18))
	sink := &tableSink{t: t, flying: map[string]int{}, trunc: map[string]bool{}, lat: rand.New(rand.NewPCG(19, 20))}
	h := start(t, Config{BatchSize: 5, MaxInFlight: 8, RetryBase: time.Millisecond}, sink)
	n, schemas := 0, 0
	for tx := 0; tx < 300; tx++ {
		var evs []pluginkit.Event
		if r.IntN(6) == 0 {
			// The first change of t in its new shape: pgoutput's
			// Relation message, hence the schema event, precedes it.
			evs = append(evs, pluginkit.Event{Table: "t", Op: pluginkit.OpSchema, Key: []byte("null")})
			schemas++
		}
		for range 1 + r.IntN(6) {
			tb := []string{"t", "u"}[r.IntN(2)]
			evs = append(evs, rowEv(tb, pluginkit.OpUpdate, r.IntN(50)))
		}
		h.pushEvents(evs...)
		n += len(evs)
	}
	h.waitResolved(30 * time.Second)
	got := sink.delivered()
	if len(got) != n || schemas == 0 {
		t.Fatalf("delivered %d of %d events (%d schema events)", len(got), n, schemas)
	}
	checkRowOrder(t, got)
	checkTableOrder(t, got)
}

// A truncate that fails on its own is parked and holds its table back:
// every later event of the table is parked behind it, other tables go on,
// and a replay delivers the truncate and then the table's events in order.
func TestParkedTruncateHoldsItsTable(t *testing.T) {
	var mu sync.Mutex
	failing := true
	sink := &tableSink{t: t, flying: map[string]int{}, trunc: map[string]bool{}, lat: rand.New(rand.NewPCG(1, 2)),
		behave: func(evs []pluginkit.Event) error {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range evs {
				if failing && e.Op == pluginkit.OpTruncate {
					return attempt.Permanent(errors.New("destination refuses truncate"))
				}
			}
			return nil
		}}
	store := &memParked{}
	h := start(t, Config{BatchSize: 4, MaxInFlight: 4, RetryBase: time.Millisecond, MaxAttempts: 3, Parked: store}, sink)
	h.pushEvents(rowEv("t", pluginkit.OpInsert, 1), rowEv("u", pluginkit.OpInsert, 1))
	h.pushEvents(truncEv("t"))
	for i := range 10 {
		h.pushEvents(rowEv("t", pluginkit.OpInsert, 10+i), rowEv("u", pluginkit.OpInsert, 10+i))
	}
	h.waitResolved(30 * time.Second)
	parked, _ := store.ListParked(context.Background(), "s", "")
	if len(parked) != 11 || parked[0].Event.Op != pluginkit.OpTruncate {
		t.Fatalf("%d events parked (first %v), want the truncate and the 10 later events of t", len(parked), parked[0].Event.Op)
	}
	if got := sink.delivered(); len(got) != 12 {
		t.Fatalf("delivered %d events, want t's first insert and u's 11", len(got))
	}
	// Events arriving while the truncate is parked park behind it.
	h.pushEvents(rowEv("t", pluginkit.OpInsert, 99))
	h.waitResolved(10 * time.Second)
	if store.len() != 12 {
		t.Fatalf("%d parked, want 12", store.len())
	}

	mu.Lock()
	failing = false
	mu.Unlock()
	if err := h.sched.Replay(context.Background(), parking.ReplayRequest{Sink: "s"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for store.len() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d events still parked after replay", store.len())
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.pushEvents(rowEv("t", pluginkit.OpInsert, 1000))
	h.waitResolved(10 * time.Second)
	got := sink.delivered()
	if len(got) != 25 {
		t.Fatalf("delivered %d events after replay, want 25", len(got))
	}
	checkRowOrder(t, got)
	checkTableOrder(t, got)
	if got[len(got)-1].ID != h.last {
		t.Fatalf("the live event after the replay arrived as %s, not last", got[len(got)-1].ID)
	}
}
