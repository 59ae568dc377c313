package cli

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

// TestSinkAheadIsNotRedelivered: of two durable sinks, one is stuck while
// the other delivers everything. After a SIGKILL and a restart the stuck
// one gets everything, and the one that was ahead gets nothing again: it
// skips every replayed event at or below its checkpoint.
func TestSinkAheadIsNotRedelivered(t *testing.T) {
	ctx := context.Background()
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	fast, slow := newReceiver(t), newReceiver(t)
	slow.setMode(modeHang)
	pipeline := writePipeline(t, "ahead", dsn, []string{"public.items"},
		sinkSpec{ID: "fast", URL: fast.URL},
		sinkSpec{ID: "slow", URL: slow.URL, Extra: "    deliver_timeout = \"1s\"\n    max_attempts = 100000\n"})
	proc := startCapturing(t, db, pipeline)
	// Fewer events than the stuck sink's queue holds: past that, the first
	// version applies backpressure to every sink (docs/architecture.md).
	const n = 800
	for i := 0; i < n; i += 100 {
		exec1(t, db, `INSERT INTO items SELECT g, 0, 'x' FROM generate_series($1::int, $2::int) g`, i, i+99)
	}
	waitFor(t, "fast sink to receive everything", time.Minute, func() bool { return fast.count() == n })
	var last pluginkit.EventID // lanes deliver rows in parallel: the highest id, not the last to arrive
	for _, e := range fast.events() {
		if e.ID.Compare(last) > 0 {
			last = e.ID
		}
	}
	waitFor(t, "fast sink's checkpoint to reach the last event", time.Minute, func() bool {
		var lsn string
		var idx uint64
		if err := db.QueryRow(ctx, `SELECT commit_lsn::text, idx FROM walcast.checkpoints WHERE pipeline = 'ahead' AND sink = 'fast'`).Scan(&lsn, &idx); err != nil {
			return false
		}
		l, _ := pluginkit.ParseLSN(lsn)
		return (pluginkit.EventID{CommitLSN: l, Index: idx}) == last
	})
	if slow.count() != 0 {
		t.Fatalf("stuck sink received %d events", slow.count())
	}
	proc.kill()
	slow.setMode(modeOK)
	proc = startWalcast(t, pipeline)
	waitFor(t, "slow sink to receive everything", time.Minute, func() bool { return slow.distinct() == n })
	waitFor(t, "both checkpoints at the last event", time.Minute, func() bool {
		var k int
		db.QueryRow(ctx, `SELECT count(*) FROM walcast.checkpoints WHERE pipeline = 'ahead' AND event_id = $1`, last.String()).Scan(&k)
		return k == 2
	})
	proc.stop()
	if got := fast.count(); got != n {
		t.Fatalf("the sink that was ahead received %d events, want exactly %d (no redelivery)", got, n)
	}
}

// TestSlotWaitsForStuckSink: while a durable sink cannot deliver, the slot's
// confirmed_flush_lsn never passes its first unacknowledged transaction,
// and walcast keeps answering the server (the test cluster's
// wal_sender_timeout is 5s; the stall lasts longer). Once the sink
// recovers the slot moves on, and while the captured table is idle but
// other tables write, keepalives keep moving it.
func TestSlotWaitsForStuckSink(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text); CREATE TABLE other (id int)`)
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "stuck", dsn, []string{"public.items"},
		sinkSpec{ID: "hook", URL: rcv.URL, Extra: "    deliver_timeout = \"1s\"\n    max_attempts = 100000\n"})
	proc := startCapturing(t, db, pipeline)
	exec1(t, db, `INSERT INTO items VALUES (0, 0, 'warm-up')`)
	waitFor(t, "warm-up event", time.Minute, func() bool { return rcv.count() == 1 })
	walsender := func() int {
		var pid int
		db.QueryRow(ctx, `SELECT pid FROM pg_stat_replication WHERE application_name = 'walcast-stuck'`).Scan(&pid)
		return pid
	}
	waitFor(t, "walsender", time.Minute, func() bool { return walsender() != 0 })
	pid := walsender()

	rcv.setMode(modeHang)
	// Past the warm-up's commit, not up to the WAL's very end: walcast
	// records each position before it confirms it (a small write of its
	// own), and does not record idle advances over less than 16 KiB.
	warm := rcv.events()[0].ID.CommitLSN
	waitFor(t, "slot to confirm the warm-up", time.Minute, func() bool {
		return confirmedFlush(t, db, "walcast_stuck") > warm
	})
	for i := 1; i <= 20; i++ {
		exec1(t, db, `INSERT INTO items VALUES ($1, 0, 'x')`, i)
	}
	// Watch for longer than wal_sender_timeout: the walsender must stay the
	// same process (no timeout, no reconnect), and the slot must not pass
	// the first unacknowledged transaction (checked once its id is known).
	var maxConfirmed uint64
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		maxConfirmed = max(maxConfirmed, confirmedFlush(t, db, "walcast_stuck"))
		if p := walsender(); p != pid {
			t.Fatalf("walsender changed from %d to %d while the sink was stuck: walcast stopped answering keepalives", pid, p)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rcv.setMode(modeOK)
	waitFor(t, "stuck events to arrive", time.Minute, func() bool { return rcv.distinct() == 21 })
	firstStuck := rcv.events()[1].ID
	for _, e := range rcv.events()[1:] { // lanes: the lowest id, not the first to arrive
		if e.ID.Compare(firstStuck) < 0 {
			firstStuck = e.ID
		}
	}
	// PostgreSQL resends every transaction whose commit record starts at or
	// after confirmed_flush_lsn, so the slot may reach, never pass, it.
	if maxConfirmed > firstStuck.CommitLSN {
		t.Fatalf("confirmed_flush_lsn reached %X during the stall, past the unacknowledged event %s", maxConfirmed, firstStuck)
	}
	var last uint64
	for _, e := range rcv.events() {
		last = max(last, e.ID.CommitLSN)
	}
	waitFor(t, "slot to move past the delivered events", time.Minute, func() bool { return confirmedFlush(t, db, "walcast_stuck") > last })

	// Captured table idle, another table busy: the slot follows.
	exec1(t, db, `INSERT INTO other SELECT generate_series(1, 1000)`)
	idleEnd := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	waitFor(t, "slot to advance while captured tables are idle", time.Minute, func() bool {
		return confirmedFlush(t, db, "walcast_stuck") >= idleEnd
	})
	proc.stop()
	if n := countLines(proc.logText(), "reconnecting"); n != 0 {
		t.Fatalf("walcast reconnected %d times during the stall", n)
	}
}

// TestPluginCrashIsRedelivered SIGKILLs the webhook plugin process while it
// delivers; the host restarts it and delivers its batch again.
func TestPluginCrashIsRedelivered(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	truthSlot(t, dsn, db, "truth_plugin")
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "plugcrash", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL})
	proc := startCapturing(t, db, pipeline)
	rcv.setMode(modeHang) // so the kill lands while a batch is in flight
	for i := 0; i < 5000; i += 500 {
		exec1(t, db, `INSERT INTO items SELECT g, 0, 'x' FROM generate_series($1::int, $2::int) g`, i, i+499)
	}
	proc.waitLog(t, "streaming from slot")
	var plugins []int
	waitFor(t, "plugin process", time.Minute, func() bool { plugins = childPIDs(proc.cmd.Process.Pid); return len(plugins) == 1 })
	if err := syscall.Kill(plugins[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	rcv.setMode(modeOK)
	want := truth(t, db, "truth_plugin", map[string]bool{"public.items": true})
	waitFor(t, fmt.Sprintf("%d events after the plugin crash", len(want)), time.Minute, func() bool { return rcv.distinct() == len(want) })
	// While walcast still runs: the events came through a new plugin
	// process, which the host started after the old one died.
	now := childPIDs(proc.cmd.Process.Pid)
	if len(now) != 1 || now[0] == plugins[0] || countLines(proc.logText(), "restarting sink plugin") == 0 {
		t.Fatalf("plugin was not restarted: walcast's children %v, killed plugin %d", now, plugins[0])
	}
	proc.stop()
	verify(t, want, rcv.events())
}
