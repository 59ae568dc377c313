package cli

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPauseResume: `walcast pause --sink a` stops deliveries to sink a at
// once while sink b goes on, keeps a's undelivered events in a slot,
// survives a restart of the daemon, and `walcast resume` delivers every
// held event in per-row order. Pausing the whole pipeline stops both sinks.
func TestPauseResume(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	a, b := newReceiver(t), newReceiver(t)
	pipeline := writePipeline(t, "pause", dsn, []string{"public.items"},
		sinkSpec{ID: "a", URL: a.URL, Batch: 10}, sinkSpec{ID: "b", URL: b.URL, Batch: 10})
	proc := startCapturing(t, db, pipeline)
	exec1(t, db, `INSERT INTO items SELECT g, 0 FROM generate_series(1, 50) g`)
	waitFor(t, "50 events at both sinks", time.Minute, func() bool { return a.distinct() == 50 && b.distinct() == 50 })

	cli := func(args ...string) string {
		t.Helper()
		out, err := walcastCLI(t, args...)
		if err != nil {
			t.Fatalf("walcast %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	if out := cli("pause", pipeline, "--sink", "a"); !strings.Contains(out, "paused sink a of pipeline pause") {
		t.Fatalf("walcast pause:\n%s", out)
	}
	proc.waitLog(t, "sink paused by an operator")
	for round := 0; round < 2; round++ {
		exec1(t, db, `UPDATE items SET v = v + 1`)
	}
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	waitFor(t, "sink b to get the 100 updates", time.Minute, func() bool { return b.distinct() == 150 })
	time.Sleep(1500 * time.Millisecond)
	if n := a.distinct(); n != 50 {
		t.Fatalf("paused sink a received %d events, want still 50", n)
	}
	// A paused sink is detached onto a catch-up slot of its own (package
	// isolate): that slot, not the pipeline's, holds what it has not
	// received.
	held := confirmedFlush(t, db, "walcast_pause")
	for _, slot := range catchupSlots(t, db, "walcast_pause") {
		held = min(held, confirmedFlush(t, db, slot))
	}
	if held >= end {
		t.Fatalf("no slot holds the events the paused sink has not received: oldest confirmed %X, end %X", held, end)
	}
	if out := cli("status", pipeline); !strings.Contains(out, "paused") || !strings.Contains(out, "running") {
		t.Fatalf("walcast status does not show a paused and b running:\n%s", out)
	}

	// A pause outlives the daemon.
	proc.stop()
	proc = startWalcast(t, pipeline)
	proc.waitLog(t, "sink paused by an operator")
	exec1(t, db, `UPDATE items SET v = v + 1 WHERE id <= 5`)
	waitFor(t, "sink b to get 5 more", time.Minute, func() bool { return b.distinct() == 155 })
	time.Sleep(time.Second)
	if n := a.distinct(); n != 50 {
		t.Fatalf("paused sink a received %d events after a restart, want still 50", n)
	}

	if out := cli("resume", pipeline, "--sink", "a"); !strings.Contains(out, "resumed sink a") {
		t.Fatalf("walcast resume:\n%s", out)
	}
	waitFor(t, "sink a to catch up", time.Minute, func() bool { return a.distinct() == 155 })
	for _, r := range []*receiver{a, b} {
		if bad := rowOrderViolations(r.events()); len(bad) > 0 {
			t.Fatalf("per-row order broken: %v", bad)
		}
	}

	// The whole pipeline.
	cli("pause", pipeline)
	waitFor(t, "both sinks to log the pause", time.Minute, func() bool {
		return countLines(proc.logText(), "sink paused by an operator") >= 3
	})
	exec1(t, db, `UPDATE items SET v = -1 WHERE id = 7`)
	time.Sleep(1500 * time.Millisecond)
	if a.distinct() != 155 || b.distinct() != 155 {
		t.Fatalf("paused pipeline delivered: a %d, b %d events, want 155 each", a.distinct(), b.distinct())
	}
	cli("resume", pipeline)
	waitFor(t, "both sinks after resume", time.Minute, func() bool { return a.distinct() == 156 && b.distinct() == 156 })
	proc.stop()
}

// rowOrderViolations lists rows whose first deliveries are out of id order.
func rowOrderViolations(evs []received) []string {
	seen := map[string]bool{}
	rows := map[string][]received{}
	for _, e := range evs {
		if id := e.ID.String(); !seen[id] {
			seen[id] = true
			rows[e.Key] = append(rows[e.Key], e)
		}
	}
	var bad []string
	for k, es := range rows {
		if !slices.IsSortedFunc(es, func(x, y received) int { return x.ID.Compare(y.ID) }) {
			bad = append(bad, k)
		}
	}
	return bad
}
