package cli

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/control/leader"
	"github.com/walcast/walcast/host/internal/delivery/isolate"
	"github.com/walcast/walcast/host/pgtest"
)

// TestLostLeaseProxyBlamesNoSink runs a pipeline with a healthy sink and a
// failing one that parks every event at its first failure, through a TCP
// proxy; then it takes the leadership away the way a network does: the
// proxy silences the lease's session (walcast's side hears nothing
// more) and the server ends it, so that the lock is free for a successor
// (the test takes it). Until the leader notices, it may deliver, but:
//
//   - no park is written after the loss (parks go through the lease's
//     session, which the loss fences),
//   - no delivery is counted as failed for the lost lease (the healthy
//     sink ends the term with failed_attempts=0, and no "delivery failed"
//     line names the leadership),
//   - no sink is detached after the loss.
//
// After each loss the test gives the lock back and checks that walcast
// leads again and that every row reaches the healthy sink. Repeated
// WALCAST_CHAOS times.
func TestLostLeaseProxyBlamesNoSink(t *testing.T) {
	ctx := context.Background()
	direct, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v text)`)
	proxy := cluster.Proxy(t)
	good, bad := newReceiver(t), newReceiver(t)
	bad.setMode(modeFail)
	const name = "lostlease"
	pipeline := writePipeline(t, name, proxy.DSN(direct), []string{"public.items"},
		sinkSpec{ID: "good", URL: good.URL, Batch: 10},
		sinkSpec{ID: "bad", URL: bad.URL, Batch: 1, Extra: "    max_attempts = 1\n    retry_base = \"50ms\"\n"})
	proc := startCapturing(t, db, pipeline)

	// Rows keep coming throughout, on a connection of their own.
	ins := connect(t, direct)
	var inserted atomic.Int64
	insCtx, stopInserts := context.WithCancel(ctx)
	insDone := make(chan error, 1)
	go func() {
		for insCtx.Err() == nil {
			n := inserted.Load() + 1
			if _, err := ins.Exec(ctx, `INSERT INTO items VALUES ($1, 'x')`, n); err != nil {
				insDone <- err
				return
			}
			inserted.Store(n)
			time.Sleep(10 * time.Millisecond)
		}
		insDone <- nil
	}()
	defer func() {
		stopInserts()
		<-insDone
	}()
	count := func(sql string, args ...any) int { return queryInt(t, db, sql, args...) }
	parked := func() int { return count(`SELECT count(*) FROM walcast.parked WHERE pipeline = $1`, name) }
	catchups := func() int {
		return count(`SELECT (SELECT count(*) FROM walcast.catchup_slots WHERE pipeline = $1)
	+ (SELECT count(*) FROM pg_replication_slots WHERE slot_name IN ($2, $3))`,
			name, isolate.SlotName("walcast_"+name, "good"), isolate.SlotName("walcast_"+name, "bad"))
	}
	class, obj := leader.Keys(name)
	lock := connect(t, direct)

	cycles := pgtest.Chaos(t, 1)
	for cycle := 1; cycle <= cycles; cycle++ {
		// Leading, delivering to one sink and parking for the other.
		before := parked()
		goodBefore := good.distinct()
		waitFor(t, "the healthy sink to receive and the failing one to park", 2*time.Minute, func() bool {
			return good.distinct() >= goodBefore+30 && parked() >= before+20
		})
		h, ok, err := leader.Current(ctx, db, name)
		if err != nil || !ok {
			t.Fatalf("cycle %d: no leader of pipeline %s (%v)", cycle, name, err)
		}
		detachedBefore := catchups()
		lostLines := countLines(proc.logText(), "standing by again after losing the leadership")

		if n := proxy.Silence(func(c pgtest.Conn) bool { return c.PID == h.PID }); n == 0 {
			t.Fatalf("cycle %d: no connection of backend %d goes through the proxy", cycle, h.PID)
		}
		loss := time.Now()
		exec1(t, db, `SELECT pg_terminate_backend($1)`, h.PID)
		// The test is the successor: it holds the lock while the old term's
		// writes are counted, so that no new term of this walcast writes.
		exec1(t, lock, `SELECT pg_advisory_lock($1, $2)`, class, obj)
		waitFor(t, "walcast to notice it lost the leadership", 2*time.Minute, func() bool {
			return countLines(proc.logText(), "standing by again after losing the leadership") > lostLines
		})
		noticed := time.Since(loss)

		after := count(`SELECT count(*) FROM walcast.parked WHERE pipeline = $1 AND last_failed_at > $2`, name, loss)
		t.Logf("cycle %d: the leader noticed the loss after %s; %d parks written after it", cycle, noticed.Round(time.Millisecond), after)
		if after > 0 {
			t.Errorf("cycle %d: %d events were parked after the leadership was lost (written through a session the lease does not fence)", cycle, after)
		}
		if n := catchups(); n != detachedBefore {
			t.Errorf("cycle %d: catch-up slots or records went from %d to %d after the leadership was lost", cycle, detachedBefore, n)
		}
		log := proc.logText()
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, "delivery failed") && strings.Contains(line, "leadership") {
				t.Errorf("cycle %d: a delivery refused for the lost lease was counted as a failure of the sink: %s", cycle, line)
				break
			}
		}
		if f := lastField(log, `msg="sink stopped"`, "sink=good", "failed_attempts"); f != "0" {
			t.Errorf("cycle %d: the healthy sink ended the term with failed_attempts=%s, want 0 (its receiver never failed)", cycle, f)
		}
		if t.Failed() {
			return
		}

		// Give the lock back: walcast leads again and goes on.
		leads := countLines(proc.logText(), "leading: this walcast streams the pipeline")
		exec1(t, lock, `SELECT pg_advisory_unlock($1, $2)`, class, obj)
		waitFor(t, "walcast to lead again", 2*time.Minute, func() bool {
			return countLines(proc.logText(), "leading: this walcast streams the pipeline") > leads
		})
	}
	stopInserts()
	if err := <-insDone; err != nil {
		t.Fatal(err)
	}
	insDone <- nil
	total := int(inserted.Load())
	waitFor(t, fmt.Sprintf("all %d rows at the healthy sink", total), 3*time.Minute, func() bool { return good.distinct() >= total })
	proc.stop()
	t.Logf("%d cycles: %d rows, all at the healthy sink; %d events parked for the failing one", cycles, total, parked())
}

// lastField returns the value of field in the last log line that contains
// every one of match, or "" when there is none.
func lastField(log, match1, match2, field string) string {
	lines := strings.Split(log, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := lines[i]
		if !strings.Contains(l, match1) || !strings.Contains(l, match2) {
			continue
		}
		m := regexp.MustCompile(`\b` + regexp.QuoteMeta(field) + `=(\S+)`).FindStringSubmatch(l)
		if m != nil {
			return m[1]
		}
	}
	return ""
}
