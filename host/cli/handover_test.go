package cli

import (
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// leaseWait is what a successor logs when it waits out the lease of a
// leader that stopped without releasing the pipeline.
const leaseWait = "waiting out its lease before streaming"

// TestGracefulHandoverIsQuick runs two instances of one pipeline under a
// steady write load and stops the leader gracefully (SIGTERM) three times,
// alternating: its term ends, its final checkpoints are written and it
// releases the pipeline on purpose, so the standby streams without waiting
// out the old leader's lease, as it must after a crash (it logs no such
// wait; the handover times are logged, not asserted: docs/operations.md
// quotes them). Every committed change arrives, first deliveries in commit
// order, and a mirror of what the sink received equals the table.
func TestGracefulHandoverIsQuick(t *testing.T) {
	reported := 0
	took, dups := takeoverRounds(t, "handover", 3, func(round int, lead, next *walcastProc) time.Duration {
		lead.cmd.Process.Signal(syscall.SIGTERM)
		stopped := time.Now()
		next.waitLog(t, "streaming from slot")
		d := time.Since(stopped)
		// A successor that waited out the 3 s lease as after a crash says
		// so: that, not the time, tells a release from a crash.
		if strings.Contains(next.logText(), leaseWait) {
			t.Errorf("round %d: the standby waited out the lease of a leader that released the pipeline", round)
		}
		lead.stop() // exits 0
		reported += redeliveredNext(t, round, lead.logText())
		return d
	})
	t.Logf("takeover times after SIGTERM: %s", strings.Join(took, ", "))
	// What a graceful stop leaves to redeliver is what the stopping
	// leader said it leaves: events delivered past one it had not
	// delivered yet (its checkpoint cannot cover them), or a batch whose
	// answer it did not get (a failed attempt). Nothing else.
	if dups > reported {
		t.Errorf("%d events arrived twice; the stopping leaders reported %d to be delivered again", dups, reported)
	}
	t.Logf("the stopping leaders reported %d events to be delivered again", reported)
}

var stoppedSink = regexp.MustCompile(`msg="sink stopped" .*failed_attempts=(\d+) .*redelivered_next=(\d+)`)

// redeliveredNext is what a stopped walcast's log says the next leader
// delivers again: the events its sinks delivered past an undelivered one,
// plus failed attempts (whose batch may have arrived all the same).
func redeliveredNext(t *testing.T, round int, log string) int {
	t.Helper()
	m := stoppedSink.FindAllStringSubmatch(log, -1)
	if len(m) == 0 {
		t.Errorf("round %d: the stopped leader did not log what it leaves to deliver again (redelivered_next)", round)
		return 0
	}
	n := 0
	for _, sm := range m {
		a, _ := strconv.Atoi(sm[1])
		b, _ := strconv.Atoi(sm[2])
		n += a + b
	}
	return n
}

// TestStopAtShutdownTimeoutCounts stops walcast while its sink hangs: once
// --shutdown-timeout runs out it says how many batches it abandoned, and the
// sink's stopped line how many events it leaves undelivered, and it still
// exits 0 with every event delivered by the next run.
func TestStopAtShutdownTimeoutCounts(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "stuckstop", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL, Batch: 5})
	proc := startWalcast(t, pipeline, "--shutdown-timeout", "1s")
	proc.waitLog(t, "streaming from slot")
	rcv.setMode(modeHang)
	exec1(t, db, `INSERT INTO items SELECT generate_series(1, 20), 0`)
	waitFor(t, "a delivery to hang", time.Minute, func() bool {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		return rcv.reqs > 0
	})
	proc.stop() // exits 0
	log := proc.logText()
	if !regexp.MustCompile(`deliveries still in flight at shutdown timeout.* batches_in_flight=[1-9]`).MatchString(log) {
		t.Errorf("walcast did not say how many batches it abandoned at the shutdown timeout")
	}
	// All 20 unless walcast had not read them all from the slot yet.
	if !regexp.MustCompile(`msg="sink stopped" .*unresolved=[1-9]`).MatchString(log) {
		t.Errorf("the sink stopped line does not count the undelivered events")
	}
	rcv.setMode(modeOK)
	next := startWalcast(t, pipeline)
	waitFor(t, "all 20 events from the next run", time.Minute, func() bool { return rcv.distinct() == 20 })
	next.stop()
}
