package cli

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestReplayAcrossDetach: a replay request that reaches the daemon while
// a sink is being detached (its live scheduler stopping, waiting for
// batches in flight to a hanging receiver) is not lost: the catch-up
// scheduler replays it once it takes over, and the request's row in
// walcast.replay_requests goes only once the replay ended.
func TestReplayAcrossDetach(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	fast, slow := newReceiver(t), newReceiver(t)
	reject := slow.rejectRow(`{"id":13}`, http.StatusInternalServerError)
	// The slow sink's requests time out only after a minute: the batches
	// in flight when it detaches hang until the receiver is released,
	// which keeps the detachment half done for as long as the test needs.
	pipeline := writePipeline(t, "isoreplay", dsn, []string{"public.items"},
		sinkSpec{ID: "fast", URL: fast.URL, Batch: 200},
		sinkSpec{ID: "slow", URL: slow.URL, Batch: 50,
			Extra:  "    max_attempts = 2\n    retry_base = \"50ms\"\n    detach_after = \"200ms\"\n",
			Config: fmt.Sprintf("    url = %q\n    timeout = \"60s\"\n", slow.URL)})
	proc := startCapturing(t, db, pipeline)
	exec1(t, db, `INSERT INTO items VALUES (13, 0, 'x')`)
	exec1(t, db, `UPDATE items SET v = 1 WHERE id = 13`)
	exec1(t, db, `UPDATE items SET v = 2 WHERE id = 13`)
	count := func(sql string) int { return queryInt(t, db, sql) }
	parked := func() int {
		return count(`SELECT count(*) FROM walcast.parked WHERE pipeline = 'isoreplay' AND sink = 'slow'`)
	}
	requests := func() int {
		return count(`SELECT count(*) FROM walcast.replay_requests WHERE pipeline = 'isoreplay'`)
	}
	waitFor(t, "row 13's 3 events to be parked", time.Minute, func() bool { return parked() == 3 })

	reject.Store(false)
	slow.setMode(modeHang)
	exec1(t, db, `INSERT INTO items SELECT g, 0, 'y' FROM generate_series(1000, 6000) g`)
	proc.waitLog(t, "detaching it to catch up")
	waitFor(t, "the catch-up slot", time.Minute, func() bool { return len(catchupSlots(t, db, "walcast_isoreplay")) == 1 })
	if out, err := walcastCLI(t, "replay", pipeline, "--sink", "slow", "--all", "--wait", "0"); err != nil {
		t.Fatalf("walcast replay: %v\n%s", err, out)
	}
	// The daemon took the request (a walcast that consumes requests as it
	// reads them deletes the row at once).
	waitFor(t, "the daemon to take the replay request", time.Minute, func() bool {
		return requests() == 0 || strings.Contains(proc.logText(), "replay requested")
	})
	if strings.Contains(proc.logText(), "sink catching up") {
		t.Fatal("the catch-up scheduler already ran when the request came: the test missed the swap")
	}

	slow.setMode(modeOK)
	waitFor(t, "row 13's parked events to be replayed", 90*time.Second, func() bool { return parked() == 0 })
	waitFor(t, "the replay request to be forgotten", time.Minute, func() bool { return requests() == 0 })
	var ids []string
	for _, e := range slow.events() {
		if e.Key == `{"id":13}` {
			ids = append(ids, e.ID.String())
		}
	}
	if len(ids) < 3 {
		t.Fatalf("row 13 reached the slow sink %d times, want its 3 events: %v", len(ids), ids)
	}
	proc.waitLog(t, "sink rejoined the live stream")
	proc.stop()
}
