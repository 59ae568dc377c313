package cli

import (
	"fmt"
	"testing"
	"time"
)

// TestPipelinesSpreadAndMove runs three walcast instances with the same six
// pipelines (one given as a directory, one as files): every pipeline is
// led exactly once, two per instance (the fair share: ceil(6/3)); when one
// instance is SIGKILLed its two pipelines move to the other two (share
// ceil(6/2) = 3 each). How long the move took is logged (docs/operations.md
// quotes it), not asserted: on a loaded machine that is a benchmark's job.
func TestPipelinesSpreadAndMove(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	rcv := newReceiver(t)
	dir, files := pipelineDir(t, dsn, "spread", []*receiver{rcv, rcv, rcv, rcv, rcv, rcv})
	var names []string
	for i := range files {
		names = append(names, fmt.Sprintf("spread%d", i))
	}
	procs := []*walcastProc{
		startWalcast(t, dir),
		startWalcast(t, dir),
		startWalcast(t, files[0], files[1:]...),
	}
	// leaders maps each pipeline to the holder of its lock; one that
	// cannot be read yet is left out.
	leaders := func() map[string]string {
		out, _ := leadersOf(db, names)
		return out
	}
	spread := func(want map[string]int) bool {
		got := map[string]int{}
		for _, h := range leaders() {
			got[h]++
		}
		if len(got) != len(want) {
			return false
		}
		for h, n := range want {
			if got[h] != n {
				return false
			}
		}
		return true
	}
	started := time.Now()
	waitFor(t, "six pipelines led 2/2/2", time.Minute, func() bool {
		return spread(map[string]int{holderName(procs[0]): 2, holderName(procs[1]): 2, holderName(procs[2]): 2})
	})
	t.Logf("spread 2/2/2 after %s", time.Since(started).Round(time.Millisecond))
	// Every pipeline delivers through whoever leads it.
	for _, n := range names {
		waitSlot(t, db, "walcast_"+n)
	}
	exec1(t, db, `INSERT INTO items SELECT g, 0 FROM generate_series(1, 10) g`)
	waitFor(t, "each pipeline to deliver", time.Minute, func() bool { return rcv.count() >= 60 })
	if out, _, code := walcastCmd(t, "status", files[0]); code != 0 || countLines(out, "standby: walcast ") != 2 {
		t.Errorf("walcast status does not list the two standbys (exit %d):\n%s", code, out)
	}

	procs[0].kill()
	killed := time.Now()
	waitFor(t, "the killed instance's pipelines to move (3/3)", time.Minute, func() bool {
		return spread(map[string]int{holderName(procs[1]): 3, holderName(procs[2]): 3})
	})
	t.Logf("pipelines moved after SIGKILL in %s", time.Since(killed).Round(time.Millisecond))
	exec1(t, db, `UPDATE items SET v = 1`)
	waitFor(t, "each pipeline to deliver the updates", time.Minute, func() bool { return rcv.count() >= 120 })
	procs[1].stop()
	procs[2].stop()
}
