package cli

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestWebhookGoneStopsTheSink: a receiver answering 410 Gone is not retried
// and parked event by event: the sink stops at once, walcast run exits 1
// saying why, and walcast status shows the sink stopped with the error
// until it delivers again after a restart.
func TestWebhookGoneStopsTheSink(t *testing.T) {
	parallel(t)
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	rcv := newReceiver(t)
	rcv.setRespond(func(http.Header, []byte, []received) (int, http.Header) { return http.StatusGone, nil })
	pipeline := writePipeline(t, "gone", dsn, []string{"public.items"},
		sinkSpec{ID: "hook", URL: rcv.URL, Batch: 10, Extra: "    retry_base = \"50ms\"\n"})
	proc := startCapturing(t, db, pipeline)
	exec1(t, db, `INSERT INTO items SELECT g, 0 FROM generate_series(1, 5) g`)

	select {
	case <-proc.exited:
		if proc.err == nil {
			t.Fatal("walcast run exited 0 after the endpoint answered 410 Gone")
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("walcast run still running 2 minutes after the endpoint answered 410 Gone")
	}
	log := proc.logText()
	if !strings.Contains(log, "410 Gone") || !strings.Contains(log, "sink cannot go on") {
		t.Errorf("the log does not say the endpoint is gone:\n%s", tail(log, 20))
	}
	if n := countLines(log, "sink throttled; pausing"); n != 0 {
		t.Errorf("410 was taken for a throttle (%d lines)", n)
	}
	parked := 0
	if err := db.QueryRow(t.Context(), `SELECT count(*) FROM walcast.parked WHERE pipeline = 'gone'`).Scan(&parked); err != nil || parked != 0 {
		t.Errorf("parked events after 410: %d (%v), want none", parked, err)
	}

	out, err := walcastCLI(t, "status", pipeline)
	if err != nil {
		t.Fatalf("walcast status: %v\n%s", err, out)
	}
	t.Logf("walcast status after 410:\n%s", out)
	if !strings.Contains(out, "stopped") || !strings.Contains(out, "sink hook stopped at") || !strings.Contains(out, "410 Gone") {
		t.Errorf("walcast status does not show the stopped sink:\n%s", out)
	}

	// The endpoint is back: a restart delivers everything and the failure
	// is cleared from status.
	rcv.setRespond(nil)
	proc2 := startWalcast(t, pipeline)
	waitFor(t, "5 events after the restart", time.Minute, func() bool { return rcv.distinct() == 5 })
	waitFor(t, "the failure cleared from status", time.Minute, func() bool {
		out, err := walcastCLI(t, "status", pipeline)
		return err == nil && !strings.Contains(out, "stopped")
	})
	proc2.stop()
}
