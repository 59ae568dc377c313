package schedule

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/pluginkit"
)

// answerSink answers each batch by naming the events fail picks as
// failed, and records every call.
type answerSink struct {
	mu    sync.Mutex
	calls [][]pluginkit.Event
	// fail returns the error of an event in call n (from 1), nil when it
	// is written.
	fail func(n int, e pluginkit.Event) error
	// answer, when set, replaces the answer built from fail.
	answer func(n int, b attempt.Batch) (attempt.Result, error)
}

func (a *answerSink) Deliver(_ context.Context, b attempt.Batch) (attempt.Result, error) {
	a.mu.Lock()
	a.calls = append(a.calls, slices.Clone(b.Events))
	n := len(a.calls)
	a.mu.Unlock()
	if a.answer != nil {
		return a.answer(n, b)
	}
	var res attempt.Result
	for i, e := range b.Events {
		if err := a.fail(n, e); err != nil {
			res.Failed = append(res.Failed, attempt.Failure{Index: i, Err: err})
		}
	}
	return res, nil
}

func (a *answerSink) callsMade() [][]pluginkit.Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.calls)
}

// startHeld starts a scheduler that takes n events into one pending batch
// before it delivers anything: it is paused until they are all held.
func startHeld(t *testing.T, cfg Config, sink Deliverer, rows ...int) *harness {
	t.Helper()
	h := start(t, cfg, sink)
	h.sched.SetPaused(true)
	h.push(rows...)
	deadline := time.Now().Add(10 * time.Second)
	for h.sched.Stats.Held.Load() != int64(len(rows)) {
		if time.Now().After(deadline) {
			t.Fatalf("the scheduler holds %d events, want %d", h.sched.Stats.Held.Load(), len(rows))
		}
		time.Sleep(time.Millisecond)
	}
	h.sched.SetPaused(false)
	return h
}

func keyOf(e pluginkit.Event) string { return string(e.Key) }

// A sink that fails one event of a batch of 100 on every attempt gets
// exactly that event parked after max_attempts, and the other 99 are
// delivered by the first attempt and never sent again.
func TestOneFailedEventOfAHundred(t *testing.T) {
	sink := &answerSink{fail: func(_ int, e pluginkit.Event) error {
		if keyOf(e) == `{"id":42}` {
			return errors.New("the destination refuses row 42")
		}
		return nil
	}}
	store := &memParked{}
	rows := make([]int, 100)
	for i := range rows {
		rows[i] = i
	}
	h := startHeld(t, Config{BatchSize: 100, MaxAttempts: 3, RetryBase: time.Millisecond, Parked: store}, sink, rows...)
	h.waitResolved(30 * time.Second)

	calls := sink.callsMade()
	if len(calls) != 3 {
		t.Fatalf("%d Deliver calls, want 3 (one for the batch, two more for the failing event)", len(calls))
	}
	if len(calls[0]) != 100 {
		t.Fatalf("the first call carried %d events, want the whole batch of 100", len(calls[0]))
	}
	sent := map[string]int{}
	for _, c := range calls {
		for _, e := range c {
			sent[keyOf(e)]++
		}
	}
	for _, r := range rows {
		want := 1
		if r == 42 {
			want = 3
		}
		if got := sent[fmt.Sprintf(`{"id":%d}`, r)]; got != want {
			t.Errorf("row %d sent %d times, want %d", r, got, want)
		}
	}
	for _, c := range calls[1:] {
		if len(c) != 1 || keyOf(c[0]) != `{"id":42}` {
			t.Errorf("a retry carried %d events (first %s), want row 42 alone", len(c), keyOf(c[0]))
		}
	}
	waitParked(t, store, 1)
	if p := store.ps[0]; keyOf(p.Event) != `{"id":42}` || p.Attempts != 3 || p.LastError != "the destination refuses row 42" {
		t.Errorf("parked %s after %d attempts (%q), want row 42 after 3", p.Event.Key, p.Attempts, p.LastError)
	}
	st := &h.sched.Stats
	if st.Delivered.Load() != 99 || st.Attempts.Load() != 3 || st.Parked.Load() != 1 || st.Failures.Load() != 3 {
		t.Errorf("stats: delivered %d, attempts %d, failures %d, parked %d; want 99, 3, 3, 1",
			st.Delivered.Load(), st.Attempts.Load(), st.Failures.Load(), st.Parked.Load())
	}
}

// An event the sink writes after a failed event of its row is not taken
// as delivered: it parks behind the failed one, while the other rows are
// delivered.
func TestFailedEventHoldsItsRow(t *testing.T) {
	sink := &answerSink{fail: func(_ int, e pluginkit.Event) error {
		if keyOf(e) == `{"id":1}` && e.ID.Index == 0 {
			return attempt.Permanent(errors.New("refused"))
		}
		return nil
	}}
	store := &memParked{}
	h := startHeld(t, Config{BatchSize: 10, RetryBase: time.Millisecond, Parked: store}, sink, 1, 2, 1, 3)
	h.waitResolved(10 * time.Second)
	waitParked(t, store, 2)
	for _, p := range store.ps {
		if keyOf(p.Event) != `{"id":1}` {
			t.Errorf("parked %s, want only row 1's events", p.Event.Key)
		}
	}
	if calls := sink.callsMade(); len(calls) != 1 {
		t.Errorf("%d calls, want 1: the failure was permanent and the rest was delivered", len(calls))
	}
	if got := h.sched.Stats.Delivered.Load(); got != 2 {
		t.Errorf("%d events delivered, want rows 2 and 3", got)
	}
}

// In strict order every event after a failed one waits for it, and goes
// again after it.
func TestStrictHoldsEverythingAfterAFailedEvent(t *testing.T) {
	sink := &answerSink{fail: func(n int, e pluginkit.Event) error {
		if n == 1 && keyOf(e) == `{"id":2}` {
			return errors.New("try again")
		}
		return nil
	}}
	h := startHeld(t, Config{BatchSize: 10, Strict: true, RetryBase: time.Millisecond, Parked: &memParked{}}, sink, 1, 2, 3, 4)
	h.waitResolved(10 * time.Second)
	calls := sink.callsMade()
	if len(calls) != 2 {
		t.Fatalf("%d calls, want 2", len(calls))
	}
	var second []string
	for _, e := range calls[1] {
		second = append(second, keyOf(e))
	}
	if want := []string{`{"id":2}`, `{"id":3}`, `{"id":4}`}; !slices.Equal(second, want) {
		t.Errorf("the second call carried %v, want %v", second, want)
	}
}

// A throttled event pauses the sink and goes again without counting an
// attempt; the others are delivered.
func TestThrottledEventIsNoAttempt(t *testing.T) {
	sink := &answerSink{fail: func(n int, e pluginkit.Event) error {
		if n == 1 && keyOf(e) == `{"id":2}` {
			return attempt.Throttled(10*time.Millisecond, errors.New("quota"))
		}
		return nil
	}}
	h := startHeld(t, Config{BatchSize: 10, ThrottleMin: 10 * time.Millisecond, MaxAttempts: 1, Parked: &memParked{}}, sink, 1, 2, 3)
	h.waitResolved(10 * time.Second)
	st := &h.sched.Stats
	if st.Throttles.Load() != 1 || st.Failures.Load() != 0 || st.Parked.Load() != 0 || st.Delivered.Load() != 3 {
		t.Errorf("throttles %d, failures %d, parked %d, delivered %d; want 1, 0, 0, 3",
			st.Throttles.Load(), st.Failures.Load(), st.Parked.Load(), st.Delivered.Load())
	}
}

// An answer that names an event the batch does not have cannot be
// trusted: the whole batch goes again.
func TestUntrustworthyAnswerRetriesTheBatch(t *testing.T) {
	sink := &answerSink{answer: func(n int, b attempt.Batch) (attempt.Result, error) {
		if n == 1 {
			return attempt.Result{Failed: []attempt.Failure{{Index: len(b.Events), Err: errors.New("?")}}}, nil
		}
		return attempt.Result{}, nil
	}}
	h := startHeld(t, Config{BatchSize: 10, RetryBase: time.Millisecond}, sink, 1, 2, 3)
	h.waitResolved(10 * time.Second)
	calls := sink.callsMade()
	if len(calls) != 2 || len(calls[1]) != 3 || h.sched.Stats.Failures.Load() != 1 {
		t.Errorf("%d calls (the second of %d events), %d failures; want the batch of 3 again after one failure", len(calls), len(calls[len(calls)-1]), h.sched.Stats.Failures.Load())
	}
}

// sortAnswer holds back exactly what must follow a failed event.
func TestSortAnswer(t *testing.T) {
	mk := func(i int, key string, op pluginkit.Op) *entry {
		return newEntry(pluginkit.Event{ID: pluginkit.EventID{CommitLSN: 1, Index: uint64(i)}, Schema: "s", Table: "t", Op: op, Key: []byte(key)}, nil)
	}
	batch := []*entry{
		mk(0, `{"a":1}`, pluginkit.OpUpdate), // fails
		mk(1, `{"a":2}`, pluginkit.OpUpdate), // delivered
		mk(2, `{"a":1}`, pluginkit.OpUpdate), // held: row of a failed event
		mk(3, `null`, pluginkit.OpTruncate),  // held: a truncate after a failed event of its table
		mk(4, `{"a":3}`, pluginkit.OpUpdate), // held: after a held truncate of its table
		mk(5, `{"a":2}`, pluginkit.OpUpdate), // held: after the held truncate
	}
	a := sortAnswer(batch, []attempt.Failure{{Index: 0, Err: errors.New("x")}}, false)
	idx := func(es []*entry) []uint64 {
		var out []uint64
		for _, e := range es {
			out = append(out, e.ev.ID.Index)
		}
		return out
	}
	if got := idx(a.delivered); !slices.Equal(got, []uint64{1}) {
		t.Errorf("delivered %v, want [1]", got)
	}
	if got := idx(a.held); !slices.Equal(got, []uint64{2, 3, 4, 5}) {
		t.Errorf("held %v, want [2 3 4 5]", got)
	}

	// Another table, or no truncate: the other rows are delivered.
	batch = []*entry{mk(0, `{"a":1}`, pluginkit.OpUpdate), mk(1, `{"a":2}`, pluginkit.OpUpdate), mk(2, `{"a":3}`, pluginkit.OpInsert)}
	a = sortAnswer(batch, []attempt.Failure{{Index: 1, Err: errors.New("x")}}, false)
	if got := idx(a.delivered); !slices.Equal(got, []uint64{0, 2}) || len(a.held) != 0 {
		t.Errorf("delivered %v held %v, want [0 2] and none", got, idx(a.held))
	}
	a = sortAnswer(batch, []attempt.Failure{{Index: 1, Err: errors.New("x")}}, true)
	if got := idx(a.delivered); !slices.Equal(got, []uint64{0}) || !slices.Equal(idx(a.held), []uint64{2}) {
		t.Errorf("strict: delivered %v held %v, want [0] and [2]", got, idx(a.held))
	}
}
