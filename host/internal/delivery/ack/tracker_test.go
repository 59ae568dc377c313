package ack

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit/cdc"
)

func id(lsn, idx uint64) cdc.EventID { return cdc.EventID{CommitLSN: lsn, Index: idx} }

func mustAdd(t *testing.T, tr *Tracker, e cdc.EventID) Seq {
	t.Helper()
	s, err := tr.Add(e)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestReleaseNeedsEveryDurableSink(t *testing.T) {
	tr := New([]SinkSpec{{ID: "a", Durable: true}, {ID: "b", Durable: true}, {ID: "sse"}}, 50)
	// tx1: commit 100, end 110, two events; tx2: commit 200, end 210, one event
	s0 := mustAdd(t, tr, id(100, 0))
	s1 := mustAdd(t, tr, id(100, 1))
	tr.Commit(110)
	s2 := mustAdd(t, tr, id(200, 0))
	tr.Commit(210)

	if got := tr.Flush(); got != 50 {
		t.Fatalf("flush before any ack = %d, want start 50", got)
	}
	tr.Resolve(0, s0, s1, s2)
	if got := tr.Flush(); got != 50 {
		t.Fatalf("flush with sink b behind = %d, want 50", got)
	}
	tr.Resolve(1, s1) // out of order: s0 still open for b
	if got := tr.Flush(); got != 50 {
		t.Fatalf("flush with b's first event open = %d, want 50", got)
	}
	tr.Resolve(1, s0)
	if got := tr.Flush(); got != 110 {
		t.Fatalf("flush = %d, want end of tx1 110", got)
	}
	wm, changed := tr.PositionsToSave()
	if !changed || wm[0] != id(200, 0) || wm[1] != id(100, 1) || !wm[2].IsZero() {
		t.Fatalf("watermarks = %v changed=%v", wm, changed)
	}
	tr.Resolve(1, s2)
	if got := tr.Flush(); got != 210 {
		t.Fatalf("flush = %d, want 210 although the non-durable sink resolved nothing", got)
	}
}

func TestMiddleOfTransactionReleasesNothing(t *testing.T) {
	tr := New([]SinkSpec{{ID: "a", Durable: true}}, 0)
	s0 := mustAdd(t, tr, id(100, 0))
	mustAdd(t, tr, id(100, 1))
	tr.Resolve(0, s0)
	tr.Commit(110)
	if got := tr.Flush(); got != 0 {
		t.Fatalf("flush = %d after acking half a transaction", got)
	}
	if tr.AdvanceIdle(500) {
		t.Fatal("idle advance with an event in flight")
	}
}

func TestAdvanceIdle(t *testing.T) {
	tr := New([]SinkSpec{{ID: "a", Durable: true}}, 10)
	if !tr.AdvanceIdle(20) || tr.Flush() != 20 {
		t.Fatalf("idle tracker did not advance: %d", tr.Flush())
	}
	if tr.AdvanceIdle(15) || tr.Flush() != 20 {
		t.Fatal("flush moved backwards")
	}
	s := mustAdd(t, tr, id(30, 0))
	if tr.AdvanceIdle(40) {
		t.Fatal("advanced over an unresolved event")
	}
	tr.Commit(35)
	tr.Resolve(0, s)
	if tr.Flush() != 35 || !tr.AdvanceIdle(40) || tr.Flush() != 40 {
		t.Fatalf("flush = %d", tr.Flush())
	}
}

func TestIdsMustIncrease(t *testing.T) {
	tr := New([]SinkSpec{{ID: "a", Durable: true}}, 0)
	mustAdd(t, tr, id(100, 1))
	if _, err := tr.Add(id(100, 1)); err == nil {
		t.Fatal("re-adding an id was accepted")
	}
	if _, err := tr.Add(id(0xA, 5)); err == nil {
		t.Fatal("a lower id was accepted")
	}
}

// TestRandomResolutionOrder resolves many events in random order across ring
// growth and checks the invariant against a brute-force model.
func TestRandomResolutionOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	tr := New([]SinkSpec{{ID: "a", Durable: true}, {ID: "b", Durable: true}}, 0)
	type ev struct {
		seq    Seq
		tx     int
		done   [2]bool
		commit uint64
	}
	var evs []ev
	var ends []uint64
	lsn := uint64(1000)
	for tx := 0; tx < 300; tx++ {
		n := 1 + r.IntN(20)
		for i := 0; i < n; i++ {
			evs = append(evs, ev{seq: mustAdd(t, tr, id(lsn, uint64(i))), tx: tx})
		}
		ends = append(ends, lsn+8)
		tr.Commit(lsn + 8)
		lsn += 100
	}
	order := r.Perm(2 * len(evs))
	for _, k := range order {
		sink, i := k%2, k/2
		evs[i].done[sink] = true
		tr.Resolve(sink, evs[i].seq)
		// model: the last tx all of whose events, and all before, are done for both sinks
		want := uint64(0)
		for tx := range ends {
			ok := true
			for _, e := range evs {
				if e.tx <= tx && !(e.done[0] && e.done[1]) {
					ok = false
					break
				}
			}
			if !ok {
				break
			}
			want = ends[tx]
		}
		if got := tr.Flush(); got != want {
			t.Fatalf("after %d resolutions flush = %d, want %d", len(order), got, want)
		}
	}
	if !tr.Idle() {
		t.Fatal("not idle after resolving everything")
	}
}

// Releases is the rule both the tracker and library mode confirm by:
// transactions go in commit order, only once resolved through their mark,
// and the idle advance needs nothing pending.
func TestReleases(t *testing.T) {
	r := NewReleases(100, func(a, b int) int { return a - b })
	r.Commit(5, 200)
	r.Commit(9, 300)
	if r.Release(4) || r.Flush() != 100 {
		t.Fatalf("released before the mark: flush %d", r.Flush())
	}
	if !r.Release(7) || r.Flush() != 200 || r.Pending() != 1 {
		t.Fatalf("after resolving 7: flush %d, pending %d", r.Flush(), r.Pending())
	}
	if r.AdvanceIdle(400, true) {
		t.Fatal("idle advance with a transaction pending")
	}
	r.Release(9)
	if r.AdvanceIdle(400, false) || r.Flush() != 300 {
		t.Fatal("idle advance with events in flight")
	}
	if !r.AdvanceIdle(400, true) || r.Flush() != 400 || r.AdvanceIdle(350, true) {
		t.Fatalf("idle advance: flush %d", r.Flush())
	}
}

// Backlog counts what a sink has not resolved, out-of-order resolutions
// included, and dates it from its oldest unresolved event.
func TestBacklog(t *testing.T) {
	tr := New([]SinkSpec{{ID: "a", Durable: true}, {ID: "b", Durable: true}}, 0)
	t0 := time.Unix(1_700_000_000, 0)
	var seqs []Seq
	for i := range 4 {
		s, err := tr.AddEvent(id(100, uint64(i)), 10*(i+1), t0.Add(time.Duration(i)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, s)
	}
	check := func(sink, events int, bytes int64, oldest time.Time) {
		t.Helper()
		e, b, o := tr.Backlog(sink)
		if e != events || b != bytes || !o.Equal(oldest) {
			t.Errorf("sink %d backlog = %d events, %d bytes, oldest %v; want %d, %d, %v", sink, e, b, o, events, bytes, oldest)
		}
	}
	check(0, 4, 100, t0)
	tr.Resolve(0, seqs[1], seqs[1]) // out of order, twice: the oldest is still event 0
	check(0, 3, 80, t0)
	tr.Resolve(0, seqs[0])
	check(0, 2, 70, t0.Add(2*time.Second))
	tr.Resolve(0, seqs[2], seqs[3])
	check(0, 0, 0, time.Time{})
	check(1, 4, 100, t0)
}

func TestDetachedSinkHoldsNothingAndRejoinCountsFromNextEvent(t *testing.T) {
	tr := New([]SinkSpec{{ID: "fast", Durable: true}, {ID: "slow", Durable: true}}, 50)
	s0 := mustAdd(t, tr, id(100, 0))
	tr.Commit(110)
	tr.Resolve(0, s0)
	if got := tr.Flush(); got != 50 {
		t.Fatalf("flush with slow behind = %d, want 50", got)
	}
	tr.Detach(1)
	if got := tr.Flush(); got != 110 {
		t.Fatalf("flush after detaching slow = %d, want 110", got)
	}
	s1 := mustAdd(t, tr, id(200, 0))
	tr.Commit(210)
	tr.Resolve(1, s1) // a late result of the detached sink changes nothing
	tr.Resolve(0, s1)
	if got := tr.Flush(); got != 210 {
		t.Fatalf("flush = %d, want 210", got)
	}
	if wm := tr.Positions(); !wm[1].IsZero() {
		t.Fatalf("detached sink's watermark moved to %v", wm[1])
	}
	if !tr.Detached(1) {
		t.Fatal("Detached(1) = false")
	}

	var from Seq
	_, last := tr.Rejoin(1, id(150, 0), func(f Seq) { from = f })
	if last != id(200, 0) {
		t.Fatalf("Rejoin's last = %v, want the last added event 200:0", last)
	}
	s2 := mustAdd(t, tr, id(300, 0))
	tr.Commit(310)
	if s2 != from {
		t.Fatalf("first event after Rejoin has seq %d, want %d", s2, from)
	}
	tr.Resolve(0, s2)
	if got := tr.Flush(); got != 210 {
		t.Fatalf("flush with the rejoined sink behind = %d, want 210", got)
	}
	if wm := tr.Positions(); wm[1] != id(150, 0) {
		t.Fatalf("rejoined watermark = %v, want 150:0", wm[1])
	}
	tr.Resolve(1, s2)
	if got := tr.Flush(); got != 310 {
		t.Fatalf("flush = %d, want 310", got)
	}
}

func TestDetachForgetsUnresolvedEvents(t *testing.T) {
	tr := New([]SinkSpec{{ID: "fast", Durable: true}, {ID: "slow", Durable: true}}, 0)
	var seqs []Seq
	for i := range 3000 { // past the ring's initial size
		seqs = append(seqs, mustAdd(t, tr, id(uint64(100+i), 0)))
		tr.Commit(uint64(100 + i + 1))
	}
	tr.Resolve(0, seqs...)
	tr.Detach(1)
	if ev, _, _ := tr.Backlog(1); ev != 0 {
		t.Fatalf("detached sink's backlog = %d, want 0", ev)
	}
	if !tr.Idle() {
		t.Fatal("tracker not idle after the only lagging sink was detached")
	}
	if got := tr.Flush(); got != 3100 {
		t.Fatalf("flush = %d, want 3100", got)
	}
}

// Ahead counts the events a sink resolved past an unresolved one: what a
// stop at that moment leaves beyond the sink's watermark.
func TestAhead(t *testing.T) {
	tr := New([]SinkSpec{{ID: "a", Durable: true}}, 0)
	var seqs []Seq
	for i := range 5 {
		s, err := tr.Add(id(100, uint64(i)))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, s)
	}
	check := func(want int, wm cdc.EventID) {
		t.Helper()
		if got := tr.Ahead(0); got != want {
			t.Errorf("ahead = %d, want %d", got, want)
		}
		if got := tr.Positions()[0]; got != wm {
			t.Errorf("watermark = %s, want %s", got, wm)
		}
	}
	check(0, cdc.EventID{})
	tr.Resolve(0, seqs[0], seqs[2], seqs[3]) // 1 is still out
	check(2, id(100, 0))
	tr.Resolve(0, seqs[1])
	check(0, id(100, 3))
	tr.Resolve(0, seqs[4])
	check(0, id(100, 4))
}
