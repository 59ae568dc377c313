package cli

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

// TestFrozenLeaderIsFenced freezes the leader (SIGSTOP) with deliveries
// pending, terminates its sessions from the source as a network cut or a
// timeout would, and lets the standby take over and deliver everything.
// Woken up (SIGCONT), the old leader must deliver nothing more and write
// no checkpoint: it learns it lost the leadership and stands by again.
func TestFrozenLeaderIsFenced(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	truthSlot(t, dsn, db, "truth_frozen")
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "frozen", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL, Batch: 10})
	first, second := leaderAndStandby(t, pipeline)

	// The destination fails: the leader holds the events and retries.
	rcv.setMode(modeFail)
	exec1(t, db, `INSERT INTO items SELECT g, 0 FROM generate_series(1, 50) g`)
	first.waitLog(t, "delivery failed")
	first.cmd.Process.Signal(syscall.SIGSTOP)
	defer first.cmd.Process.Signal(syscall.SIGCONT)
	standby := holderName(second)
	exec1(t, db, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name <> $1`, standby)
	stopped := time.Now()
	second.waitLog(t, "streaming from slot")
	t.Logf("takeover from a frozen leader: %s", time.Since(stopped).Round(time.Millisecond))
	// The frozen leader released nothing: its lease may still have been
	// fresh when it froze, so the successor waits it out before streaming.
	if !strings.Contains(second.logText(), leaseWait) {
		t.Error("the standby streamed without waiting out the lease of a leader that vanished without releasing the pipeline")
	}
	rcv.setMode(modeOK)
	want := truth(t, db, "truth_frozen", map[string]bool{"public.items": true})
	waitFor(t, "the new leader to deliver everything", time.Minute, func() bool { return rcv.distinct() >= len(want) })
	checkpoints := func() string {
		var s string
		if err := db.QueryRow(context.Background(), `SELECT coalesce(string_agg(sink || '=' || commit_lsn::text || ':' || idx, ','), '') FROM walcast.checkpoints`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	// The new leader's checkpoint settles on the last event, and nothing
	// else is written.
	var last pluginkit.EventID
	for _, e := range rcv.events() {
		if e.ID.Compare(last) > 0 {
			last = e.ID
		}
	}
	waitFor(t, "the new leader's checkpoint at the last event", time.Minute, func() bool {
		return checkpoints() == fmt.Sprintf("hook=%s:%d", pluginkit.FormatLSN(last.CommitLSN), last.Index)
	})
	before, got := checkpoints(), rcv.count()

	first.cmd.Process.Signal(syscall.SIGCONT)
	first.waitLog(t, "leadership lost")
	first.waitLog(t, "standing by again")
	if n := rcv.count(); n != got {
		t.Errorf("the woken old leader delivered %d more events after losing the leadership", n-got)
	}
	if after := checkpoints(); after != before {
		t.Errorf("checkpoints moved after the old leader woke up: %s, then %s", before, after)
	}
	if strings.Count(first.logText(), "streaming from slot") != 1 {
		t.Errorf("the old leader streamed again while the new one leads:\n%s", first.logText())
	}
	second.stop()
	first.stop()
	verify(t, want, rcv.events())
}
