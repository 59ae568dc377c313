package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// statusBacklogOf runs walcast status --json and returns the sink's
// reported backlog (nil: none shown).
func statusBacklogOf(t *testing.T, pipeline, sink string) *statusBacklog {
	t.Helper()
	out, _, code := walcastCmd(t, "status", pipeline, "--json")
	var rep statusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
		t.Fatalf("walcast status --json (exit %d): %v\n%s", code, err, out)
	}
	for _, s := range rep.Sinks {
		if s.ID == sink {
			return s.Backlog
		}
	}
	t.Fatalf("walcast status --json has no sink %s:\n%s", sink, out)
	return nil
}

// TestStatusShowsBacklog: walcast status, in another process, shows how
// many events a sink still has to take while its destination hangs, then
// an empty backlog once it recovers, and nothing once no daemon runs (a
// stale report would be a lie).
func TestStatusShowsBacklog(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	rcv := newReceiver(t)
	rcv.setMode(modeHang) // every request waits: the events stay in flight
	pipeline := writePipeline(t, "backlog", dsn, []string{"public.items"},
		sinkSpec{ID: "hook", URL: rcv.URL, Batch: 10, Config: "    url = \"" + rcv.URL + "\"\n    timeout = \"60s\"\n"})
	proc := startWalcast(t, pipeline)
	proc.waitLog(t, "streaming from slot")
	exec1(t, db, `INSERT INTO items SELECT g, 0 FROM generate_series(1, 40) g`)

	var b *statusBacklog
	waitFor(t, "status to show a backlog of 40 events", time.Minute, func() bool {
		b = statusBacklogOf(t, pipeline, "hook")
		return b != nil && b.Events == 40
	})
	if b.Bytes <= 0 || b.OldestSeconds < 0 {
		t.Errorf("backlog of 40 events: %+v, want bytes and an age", *b)
	}
	out, _, _ := walcastCmd(t, "status", pipeline)
	if !strings.Contains(out, "BACKLOG") || !strings.Contains(out, " 40 (") {
		t.Errorf("walcast status text does not show the backlog of 40:\n%s", out)
	}

	rcv.setMode(modeOK)
	waitFor(t, "the receiver to get every event", time.Minute, func() bool { return rcv.distinct() >= 40 })
	waitFor(t, "status to show an empty backlog", time.Minute, func() bool {
		b = statusBacklogOf(t, pipeline, "hook")
		return b != nil && b.Events == 0
	})

	proc.stop()
	if b := statusBacklogOf(t, pipeline, "hook"); b != nil {
		t.Errorf("with no daemon running, status still shows a backlog: %+v", *b)
	}
}
