package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/pluginkit"
)

// model is a copy of the source's tables built the way a consumer of a
// sink builds one: applying each change in the order it arrives, the
// first copy of each id only (at-least-once: later copies are
// duplicates). The same type models the source itself, fed in commit
// order.
type model struct {
	tables map[string]map[string]string // "schema.table" → key → value
	seen   map[pluginkit.EventID]bool
}

func newModel() *model {
	return &model{tables: map[string]map[string]string{}, seen: map[pluginkit.EventID]bool{}}
}

// change is what a test event's payload carries besides the envelope's
// fields: the row's value and, for an update that changed the key, the
// key it moved away from (pluginkit.Event has no old key of its own).
type change struct {
	Value  string `json:"v,omitempty"`
	OldKey string `json:"old,omitempty"`
}

func changePayload(value, oldKey string) []byte {
	b, _ := json.Marshal(change{Value: value, OldKey: oldKey})
	return b
}

// apply applies one event; it reports false for a duplicate.
func (m *model) apply(ev pluginkit.Event) bool {
	if m.seen[ev.ID] {
		return false
	}
	m.seen[ev.ID] = true
	table := ev.Schema + "." + ev.Table
	rows := m.tables[table]
	if rows == nil {
		rows = map[string]string{}
		m.tables[table] = rows
	}
	var c change
	_ = json.Unmarshal(ev.Payload, &c) // every test event carries one

	switch ev.Op {
	case pluginkit.OpTruncate:
		clear(rows)
	case pluginkit.OpDelete:
		delete(rows, string(ev.Key))
	default:
		if c.OldKey != "" {
			delete(rows, c.OldKey)
		}
		rows[string(ev.Key)] = c.Value
	}
	return true
}

// diff describes how m differs from want ("" when they hold the same rows).
func (m *model) diff(want *model) string {
	for _, table := range slices.Sorted(maps.Keys(unionKeys(m.tables, want.tables))) {
		got, exp := m.tables[table], want.tables[table]
		for _, k := range slices.Sorted(maps.Keys(unionKeys(got, exp))) {
			g, gok := got[k]
			w, wok := exp[k]
			switch {
			case !gok:
				return fmt.Sprintf("%s: row %s (%q) is in the source but missing at the destination", table, k, w)
			case !wok:
				return fmt.Sprintf("%s: row %s (%q) is at the destination but not in the source", table, k, g)
			case g != w:
				return fmt.Sprintf("%s: row %s is %q at the destination, %q in the source", table, k, g, w)
			}
		}
	}
	return ""
}

func unionKeys[V any](a, b map[string]V) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// firstCopies returns each id's first arrival, in arrival order.
func firstCopies(evs []pluginkit.Event) []pluginkit.Event {
	seen := map[pluginkit.EventID]bool{}
	var out []pluginkit.Event
	for _, e := range evs {
		if !seen[e.ID] {
			seen[e.ID] = true
			out = append(out, e)
		}
	}
	return out
}

// checkOrder is the order validator: among first copies, the changes of
// one row (an update that changed the key belongs to both its keys) arrive
// in id order, and every event of a table arrives on the same side of each
// of the table's truncates as in the source. It returns the first
// violation, "" when there is none.
func checkOrder(evs []pluginkit.Event) string {
	evs = firstCopies(evs)
	last := map[string]pluginkit.EventID{}
	for _, e := range evs {
		rows := []string{rowKey(e)}
		var c change
		if e.Op != pluginkit.OpTruncate && json.Unmarshal(e.Payload, &c) == nil && c.OldKey != "" {
			rows = append(rows, rowOf(e, []byte(c.OldKey)))
		}
		for _, r := range rows {
			if p, ok := last[r]; ok && e.ID.Compare(p) <= 0 {
				return fmt.Sprintf("row %q: %s arrived after %s", r, e.ID, p)
			}
			last[r] = e.ID
		}
	}
	// Per table: the truncates seen so far, in arrival order. An event
	// arriving after a truncate must be later than it, and no later than
	// the table's next truncate that has not arrived yet.
	type tstate struct{ maxTrunc pluginkit.EventID }
	tables := map[string]*tstate{}
	for i, e := range evs {
		tb := e.Schema + "." + e.Table
		st := tables[tb]
		if st == nil {
			st = &tstate{}
			tables[tb] = st
		}
		if !st.maxTrunc.IsZero() && e.ID.Compare(st.maxTrunc) < 0 {
			return fmt.Sprintf("%s: %s %s arrived after the table's truncate %s", tb, e.Op, e.ID, st.maxTrunc)
		}
		if e.Op == pluginkit.OpTruncate {
			st.maxTrunc = e.ID
			// Every earlier event of the table must have arrived already.
			for _, o := range evs[i+1:] {
				if o.Schema+"."+o.Table == tb && o.ID.Compare(e.ID) < 0 {
					return fmt.Sprintf("%s: %s %s arrived after the table's later truncate %s", tb, o.Op, o.ID, e.ID)
				}
			}
		}
	}
	return ""
}

// truncSink is an in-process sink that refuses, on demand, the events of
// some keys and the truncates of some tables (permanently, so they park
// at once when alone), fails whole batches now and then, and records what
// it accepted in the order it accepted it. It also checks the barrier as
// a destination sees it: a truncate is never in flight with another event
// of its table.
type truncSink struct {
	mu        sync.Mutex
	badKeys   map[string]bool // "table/key"
	badTrunc  map[string]bool // table
	transient float64         // probability that a batch fails with a retryable error
	// retryable makes the refusal of a key a retryable error: the event
	// is retried up to max_attempts before it parks.
	retryable bool
	// latency, when set, is the most a delivery takes (random, from 0).
	latency time.Duration
	// hold, when set, holds a batch that hold says to hold: it signals
	// held and waits for release.
	hold          func(evs []pluginkit.Event) bool
	held, release chan struct{}
	rnd           *rand.Rand
	got           []pluginkit.Event
	// flying counts the batches in flight per table, truncFlying the
	// truncates; violation is the first barrier violation seen.
	flying, truncFlying map[string]int
	violation           string
}

func newTruncSink(seed uint64) *truncSink {
	return &truncSink{badKeys: map[string]bool{}, badTrunc: map[string]bool{}, rnd: rand.New(rand.NewPCG(seed, seed^0x5eed)),
		flying: map[string]int{}, truncFlying: map[string]int{}}
}

func (s *truncSink) Deliver(_ context.Context, b attempt.Batch) (attempt.Result, error) {
	evs := b.Events
	s.mu.Lock()
	for _, e := range evs {
		if e.Op == pluginkit.OpTruncate && s.badTrunc[e.Table] {
			s.mu.Unlock()
			return attempt.Result{}, attempt.Permanent(fmt.Errorf("destination refuses truncate of %s", e.Table))
		}
		var c change
		_ = json.Unmarshal(e.Payload, &c)
		if s.badKeys[e.Table+"/"+string(e.Key)] || (c.OldKey != "" && s.badKeys[e.Table+"/"+c.OldKey]) {
			retryable := s.retryable
			s.mu.Unlock()
			err := fmt.Errorf("destination refuses row %s of %s", e.Key, e.Table)
			if retryable {
				return attempt.Result{}, err
			}
			return attempt.Result{}, attempt.Permanent(err)
		}
	}
	if s.transient > 0 && s.rnd.Float64() < s.transient {
		s.mu.Unlock()
		return attempt.Result{}, errors.New("destination briefly unavailable")
	}
	tables, truncs := map[string]int{}, map[string]bool{}
	for _, e := range evs {
		tables[e.Table]++
		if e.Op == pluginkit.OpTruncate {
			truncs[e.Table] = true
		}
	}
	for tb, n := range tables {
		if s.violation == "" && ((truncs[tb] && (n > 1 || s.flying[tb] > 0)) || s.truncFlying[tb] > 0) {
			s.violation = fmt.Sprintf("a truncate of %s was in flight with another event of its table", tb)
		}
		s.flying[tb]++
	}
	for tb := range truncs {
		s.truncFlying[tb]++
	}
	var d time.Duration
	if s.latency > 0 {
		d = time.Duration(s.rnd.Int64N(int64(s.latency)))
	}
	hold := s.hold != nil && s.hold(evs)
	if hold {
		s.hold = nil // once
	}
	s.mu.Unlock()
	if hold {
		s.held <- struct{}{}
		<-s.release
	}
	if d > 0 {
		time.Sleep(d)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for tb := range tables {
		s.flying[tb]--
	}
	for tb := range truncs {
		s.truncFlying[tb]--
	}
	s.got = append(s.got, evs...)
	return attempt.Result{}, nil
}

func (s *truncSink) heal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.badKeys)
	clear(s.badTrunc)
	s.transient = 0
	s.retryable = false
}

func (s *truncSink) delivered() []pluginkit.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

func (s *truncSink) set(f func(s *truncSink)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// source feeds a harness and keeps the source's own model.
type source struct {
	h   *harness
	src *model
}

// commit commits one transaction and returns its events' ids.
func (s *source) commit(evs ...pluginkit.Event) []pluginkit.EventID {
	s.h.pushEvents(evs...)
	ids := make([]pluginkit.EventID, len(evs))
	for i := range evs {
		ids[i] = pluginkit.EventID{CommitLSN: s.h.lsn, Index: uint64(i)}
		ev := evs[i]
		ev.ID, ev.Schema = ids[i], "public"
		s.src.apply(ev)
	}
	return ids
}

func ins(table string, key int, value string) pluginkit.Event {
	return pluginkit.Event{Table: table, Op: pluginkit.OpInsert, Key: fmt.Appendf(nil, `{"id":%d}`, key), Payload: changePayload(value, "")}
}

func trunc(table string) pluginkit.Event {
	return pluginkit.Event{Table: table, Op: pluginkit.OpTruncate, Key: []byte("null"), Payload: changePayload("", "")}
}

// replayWait asks for a replay and waits until it ended.
func replayWait(t *testing.T, s *Scheduler, id pluginkit.EventID) {
	t.Helper()
	select {
	case err := <-s.ReplayWait(context.Background(), parking.ReplayRequest{Sink: "s", ID: id}):
		if err != nil {
			t.Fatalf("replay %v: %v", id, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("replay %v did not end within 30s", id)
	}
}

// mirrorOf applies what the sink accepted, in arrival order.
func mirrorOf(evs []pluginkit.Event) *model {
	m := newModel()
	for _, e := range evs {
		m.apply(e)
	}
	return m
}

// A row parked behind a parked TRUNCATE, replayed alone by id, would be
// deleted at the destination by the truncate replayed after it, although
// the source holds it: a replay by id brings the table's parked truncate
// (and what is parked before that) along, in order.
func TestReplayByIDBringsTheParkedTruncateBeforeIt(t *testing.T) {
	sink := newTruncSink(1)
	sink.badTrunc["t"] = true
	store := &memParked{}
	h := start(t, Config{BatchSize: 4, MaxInFlight: 4, RetryBase: time.Millisecond, MaxAttempts: 2, Parked: store}, sink)
	src := &source{h: h, src: newModel()}
	src.commit(ins("t", 1, "a"))
	src.commit(trunc("t"))
	row := src.commit(ins("t", 2, "b"))[0]
	h.waitResolved(10 * time.Second)
	waitParked(t, store, 2) // the truncate, and the insert behind it

	sink.heal()
	replayWait(t, h.sched, row)
	// Whatever the replay by id left parked, a replay of all delivers.
	replayWait(t, h.sched, pluginkit.EventID{})
	waitParked(t, store, 0)
	got := sink.delivered()
	if d := mirrorOf(got).diff(src.src); d != "" {
		t.Fatalf("after replay --id %s and replay --all: %s (arrival order %v)", row, d, ids(got))
	}
	if v := checkOrder(got); v != "" {
		t.Fatal(v)
	}
}

// A row parked before a TRUNCATE must hold the truncate back: delivered
// first, the truncate would let the row's replay resurrect a row the
// source truncated. Both ways the truncate can meet the parked row are
// covered: arriving once the row is parked, and waiting behind the row
// while the row is still being retried.
func TestTruncateParksBehindAnEarlierParkedRow(t *testing.T) {
	for _, tc := range []struct {
		name string
		// waitParked: the truncate is committed once the row is parked;
		// otherwise right behind the row, which is still being retried.
		waitParked bool
	}{{"arriving after the row parked", true}, {"waiting behind the row being retried", false}} {
		t.Run(tc.name, func(t *testing.T) {
			sink := newTruncSink(2)
			sink.badKeys[`t/{"id":1}`] = true
			// A retryable refusal: the row is retried for a while (max
			// attempts 3, 20 ms apart) before it parks.
			sink.retryable = true
			store := &memParked{}
			h := start(t, Config{BatchSize: 4, MaxInFlight: 4, RetryBase: 20 * time.Millisecond, MaxAttempts: 3, Parked: store}, sink)
			src := &source{h: h, src: newModel()}
			row := src.commit(ins("t", 1, "a"))[0]
			if tc.waitParked {
				h.waitResolved(10 * time.Second)
				waitParked(t, store, 1)
			}
			tr := src.commit(trunc("t"))[0]
			src.commit(ins("t", 2, "b"), ins("u", 1, "other table"))
			h.waitResolved(10 * time.Second)
			for _, e := range sink.delivered() {
				if e.ID == tr {
					t.Fatalf("truncate %s delivered while the earlier row %s of its table is parked", tr, row)
				}
			}

			sink.heal()
			replayWait(t, h.sched, row)
			replayWait(t, h.sched, pluginkit.EventID{})
			waitParked(t, store, 0)
			got := sink.delivered()
			if d := mirrorOf(got).diff(src.src); d != "" {
				t.Fatalf("after replay --id %s and replay --all: %s (arrival order %v)", row, d, ids(got))
			}
			if v := checkOrder(got); v != "" {
				t.Fatal(v)
			}
		})
	}
}

func ids(evs []pluginkit.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = fmt.Sprintf("%s %s.%s %s", e.ID, e.Schema, e.Table, e.Key)
		if e.Op == pluginkit.OpTruncate {
			out[i] = fmt.Sprintf("%s truncate %s.%s", e.ID, e.Schema, e.Table)
		}
	}
	return out
}

// One replay leaves nothing of what it holds back parked: events of a
// table that arrive while the table's truncate is being replayed, and a
// truncate that arrives while rows of its table are, park behind the
// replay and are delivered by it, in order, instead of waiting for the
// next replay (with the table held behind them meanwhile).
func TestArrivalsBehindAReplayJoinIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		// park makes the sink park something, returns what the held
		// replay batch is, and what arrives while it is held.
		refuse  func(s *truncSink)
		held    func(evs []pluginkit.Event) bool
		arrive  []pluginkit.Event
		parked0 int
	}{
		{
			name:    "events of a table whose truncate is replayed",
			refuse:  func(s *truncSink) { s.badTrunc["t"] = true },
			held:    func(evs []pluginkit.Event) bool { return evs[0].Op == pluginkit.OpTruncate },
			arrive:  []pluginkit.Event{ins("t", 5, "e"), ins("t", 6, "f"), trunc("t"), ins("t", 7, "g")},
			parked0: 2,
		},
		{
			name:    "a truncate of a table whose row is replayed",
			refuse:  func(s *truncSink) { s.badKeys[`t/{"id":1}`] = true },
			held:    func(evs []pluginkit.Event) bool { return string(evs[0].Key) == `{"id":1}` },
			arrive:  []pluginkit.Event{trunc("t"), ins("t", 7, "g")},
			parked0: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink := newTruncSink(3)
			tc.refuse(sink)
			store := &memParked{}
			h := start(t, Config{BatchSize: 4, MaxInFlight: 4, RetryBase: time.Millisecond, MaxAttempts: 1, Parked: store}, sink)
			src := &source{h: h, src: newModel()}
			src.commit(ins("t", 1, "a"))
			if tc.parked0 == 2 {
				src.commit(trunc("t"))
				src.commit(ins("t", 2, "b"))
			}
			h.waitResolved(10 * time.Second)
			waitParked(t, store, tc.parked0)

			sink.heal()
			sink.set(func(s *truncSink) {
				s.hold, s.held, s.release = tc.held, make(chan struct{}), make(chan struct{})
			})
			done := h.sched.ReplayWait(context.Background(), parking.ReplayRequest{Sink: "s"})
			select {
			case <-sink.held:
			case <-time.After(10 * time.Second):
				t.Fatal("the replay never reached the sink")
			}
			for _, ev := range tc.arrive {
				src.commit(ev)
			}
			h.waitResolved(10 * time.Second) // parked on arrival, behind the replay
			close(sink.release)
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the replay did not end")
			}
			if n := store.len(); n != 0 {
				ps, _ := store.ListParked(context.Background(), "s", "")
				t.Fatalf("%d events still parked after one replay of all: %v", n, ps)
			}
			// The table flows again.
			src.commit(ins("t", 9, "z"))
			h.waitResolved(10 * time.Second)
			got := sink.delivered()
			if d := mirrorOf(got).diff(src.src); d != "" {
				t.Fatalf("%s (arrival order %v)", d, ids(got))
			}
			if v := checkOrder(got); v != "" {
				t.Fatal(v)
			}
		})
	}
}
