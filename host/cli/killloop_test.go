package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/walcast/walcast/host/pgtest"
)

// TestStandbyKillLoop runs two instances of one pipeline under a steady
// write load and SIGKILLs the leader five times, alternating: each time
// the standby streams (how long it took is logged, not asserted), and in
// the end every committed change arrived, the first deliveries of each row
// in commit order, and a mirror of what the sink received equals the
// table.
func TestStandbyKillLoop(t *testing.T) {
	parallel(t)
	took, _ := takeoverRounds(t, "killloop", pgtest.Chaos(t, 5), func(round int, lead, next *walcastProc) time.Duration {
		lead.kill()
		killed := time.Now()
		next.waitLog(t, "streaming from slot")
		return time.Since(killed)
	})
	t.Logf("takeover times after SIGKILL: %s", strings.Join(took, ", "))
}

// takeoverRounds runs two instances of pipeline name under a steady write
// load (a transaction every few milliseconds, inserting a row or updating
// one of the last ones) for the given rounds: in each, once the leader
// delivers, handOver ends its leadership and waits for the standby to
// stream, returning how long that took; the old leader is then started
// again as the next standby.
// Afterwards every committed change must have arrived (test_decoding is
// the truth), first deliveries in row order, and a mirror of what the sink
// received must equal the table. It returns the handover times and how
// many events arrived more than once.
func takeoverRounds(t *testing.T, name string, rounds int, handOver func(round int, lead, next *walcastProc) time.Duration) (took []string, dups int) {
	t.Helper()
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	truthSlot(t, dsn, db, "truth_"+name)
	rcv := newReceiver(t)
	pipeline := writePipeline(t, name, dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL, Batch: 20})
	var procs [2]*walcastProc
	procs[0], procs[1] = leaderAndStandby(t, pipeline)

	wdb := connect(t, dsn)
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for i := 1; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			case <-time.After(5 * time.Millisecond):
			}
			_, err := wdb.Exec(context.Background(), `INSERT INTO items VALUES ($1, 0)`, i)
			if err == nil {
				_, err = wdb.Exec(context.Background(), `UPDATE items SET v = v + 1 WHERE id > $1 - 5`, i)
			}
			if err != nil {
				done <- err
				return
			}
		}
	}()
	for round := range rounds {
		lead, next := procs[round%2], procs[1-round%2]
		n := rcv.count()
		waitFor(t, "the leader to deliver under load", time.Minute, func() bool { return rcv.count() > n+20 })
		took = append(took, handOver(round, lead, next).Round(time.Millisecond).String())
		procs[round%2] = startWalcast(t, pipeline)
		procs[round%2].waitLog(t, "standing by")
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := truth(t, db, "truth_"+name, map[string]bool{"public.items": true})
	waitFor(t, fmt.Sprintf("all %d changes", len(want)), time.Minute, func() bool { return rcv.distinct() >= len(want) })
	dups = verify(t, want, rcv.events())
	t.Logf("%d changes, %d redelivered", len(want), dups)
	checkMirror(t, db, applyStream(t, rcv.events()), "items")
	procs[0].stop()
	procs[1].stop()
	return took, dups
}
