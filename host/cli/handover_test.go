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
// releases the pipeline on purpose, so the standby streams at once (within
// its poll interval, 2 s) without waiting out the old leader's lease, as
// it must after a crash. Every committed change arrives, first deliveries
// in commit order, and a mirror of what the sink received equals the table.
func TestGracefulHandoverIsQuick(t *testing.T) {
	reported := 0
	took, dups := takeoverRounds(t, "handover", 3, func(round int, lead, next *walcastProc) time.Duration {
		lead.cmd.Process.Signal(syscall.SIGTERM)
		stopped := time.Now()
		next.waitLog(t, "streaming from slot")
		d := time.Since(stopped)
		// The standby polls the lock every 2 s; the old leader's drain and
		// the new leader's start come on top. 4 s leaves room for a
		// loaded machine while failing a successor that waits out the
		// 3 s lease as after a crash.
		if d > 4*time.Second {
			t.Errorf("round %d: the standby took %s to stream after a graceful stop, want under 4s", round, d)
		}
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
