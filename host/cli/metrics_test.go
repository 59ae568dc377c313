package cli

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"sync"
	"testing"
	"time"
)

// TestMetrics scrapes `walcast run --metrics-listen` with Prometheus's own
// text parser: delivered events and bytes, attempts and failures (a
// receiver failing for a while), the Deliver latency histogram by outcome,
// the slot positions, the pause gauge and /healthz.
func TestMetrics(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "metrics", dsn, []string{"public.items"},
		sinkSpec{ID: "hook", URL: rcv.URL, Batch: 10, Extra: "    retry_base = \"50ms\"\n"})
	proc := startWalcast(t, pipeline, "--metrics-listen", "127.0.0.1:0")
	base := metricsBase(t, proc)
	waitSlot(t, db, "walcast_metrics")

	exec1(t, db, `INSERT INTO items SELECT g, 0 FROM generate_series(1, 100) g`)
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	waitFor(t, "100 events", time.Minute, func() bool { return rcv.distinct() == 100 })
	waitFor(t, "the slot to be confirmed past the inserts", time.Minute, func() bool {
		return value(t, scrape(t, base), "walcast_confirmed_flush_lsn", nil) >= float64(end)
	})
	mf := scrape(t, base)
	hook := map[string]string{"pipeline": "metrics", "sink": "hook", "type": "webhook"}
	want := func(name string, labels map[string]string, ok func(float64) bool, what string) {
		t.Helper()
		if v := value(t, mf, name, labels); !ok(v) {
			t.Errorf("%s%v = %v, want %s", name, labels, v, what)
		}
	}
	eq := func(x float64) func(float64) bool { return func(v float64) bool { return v == x } }
	want("walcast_sink_events_delivered_total", hook, eq(100), "100")
	want("walcast_events_captured_total", nil, eq(100), "100")
	want("walcast_sink_delivered_bytes_total", hook, func(v float64) bool { return v > 100*50 }, "the envelopes' bytes")
	want("walcast_sink_delivery_failures_total", hook, eq(0), "0")
	want("walcast_sink_unresolved_events", hook, eq(0), "0")
	want("walcast_sink_paused", hook, eq(0), "0")
	want("walcast_streaming", nil, eq(1), "1")
	want("walcast_received_lsn", nil, func(v float64) bool { return v >= float64(end) }, fmt.Sprintf(">= %d", end))
	want("walcast_sink_watermark_lsn", hook, func(v float64) bool { return v > 0 && v <= float64(end) }, "the last commit")
	want("walcast_sink_last_success_timestamp_seconds", hook, func(v float64) bool {
		return time.Since(time.Unix(int64(v), 0)) < time.Minute
	}, "within the last minute")
	attempts := value(t, mf, "walcast_sink_delivery_attempts_total", hook)
	okCount := histogramCount(t, mf, "walcast_sink_deliver_duration_seconds", map[string]string{"sink": "hook", "type": "webhook", "outcome": "ok"})
	if attempts < 10 || okCount != attempts {
		t.Errorf("attempts %v, ok Deliver observations %v: want equal and at least 10 (100 events, batches of 10)", attempts, okCount)
	}
	if value(t, mf, "go_goroutines", nil) == 0 || value(t, mf, "process_resident_memory_bytes", nil) == 0 {
		t.Error("Go runtime or process metrics missing")
	}
	// Lag: nothing is waiting for the sink, and the slot's retained WAL
	// comes from PostgreSQL.
	want("walcast_sink_backlog_events", hook, eq(0), "0")
	want("walcast_sink_backlog_bytes", hook, eq(0), "0")
	want("walcast_sink_oldest_unresolved_age_seconds", hook, eq(0), "0")
	var retained int64
	if err := db.QueryRow(t.Context(), `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint FROM pg_replication_slots WHERE slot_name = 'walcast_metrics'`).Scan(&retained); err != nil {
		t.Fatal(err)
	}
	want("walcast_slot_retained_wal_bytes", nil, func(v float64) bool { return v > 0 && v <= float64(retained) }, fmt.Sprintf("in (0, %d]", retained))
	// Every metric the README's alert rules use is in a real scrape.
	rules, err := os.ReadFile("../../examples/prometheus/walcast-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range regexp.MustCompile(`walcast_[a-z_]+`).FindAllString(string(rules), -1) {
		if _, ok := mf[name]; !ok {
			t.Errorf("alert rules use %s, which walcast does not export", name)
		}
	}

	// A failing receiver shows up as failures and retryable observations.
	rcv.setMode(modeFail)
	exec1(t, db, `UPDATE items SET v = 1 WHERE id = 1`)
	waitFor(t, "failed attempts in the metrics", time.Minute, func() bool {
		return value(t, scrape(t, base), "walcast_sink_delivery_failures_total", hook) >= 2
	})
	// The failing update is the sink's backlog, and it ages.
	waitFor(t, "the failing update in the backlog, aging", time.Minute, func() bool {
		mf := scrape(t, base)
		return value(t, mf, "walcast_sink_backlog_events", hook) == 1 && value(t, mf, "walcast_sink_backlog_bytes", hook) > 50 &&
			value(t, mf, "walcast_sink_oldest_unresolved_age_seconds", hook) > 0
	})
	rcv.setMode(modeOK)
	waitFor(t, "the update after recovery", time.Minute, func() bool { return rcv.distinct() == 101 })
	mf = scrape(t, base)
	if n := histogramCount(t, mf, "walcast_sink_deliver_duration_seconds", map[string]string{"sink": "hook", "type": "webhook", "outcome": "retryable"}); n < 2 {
		t.Errorf("retryable Deliver observations %v, want at least 2", n)
	}

	// walcast_sink_delivery_attempts_total is a counter: scraped while a
	// request the receiver will throttle is in flight, after the throttle,
	// and after the delivery, it never goes down, and the throttled
	// request is not an attempt.
	entered, release := make(chan struct{}), make(chan struct{})
	var throttled sync.Once
	rcv.setRespond(func(http.Header, []byte, []received) (int, http.Header) {
		status := 0
		throttled.Do(func() {
			close(entered)
			<-release
			status = http.StatusTooManyRequests
		})
		return status, http.Header{"Retry-After": {"1"}}
	})
	before := value(t, scrape(t, base), "walcast_sink_delivery_attempts_total", hook)
	exec1(t, db, `UPDATE items SET v = 2 WHERE id = 2`)
	<-entered
	during := value(t, scrape(t, base), "walcast_sink_delivery_attempts_total", hook)
	close(release)
	waitFor(t, "the throttle in the metrics", time.Minute, func() bool {
		return value(t, scrape(t, base), "walcast_sink_throttles_total", hook) >= 1
	})
	afterThrottle := value(t, scrape(t, base), "walcast_sink_delivery_attempts_total", hook)
	waitFor(t, "the update after the throttle", time.Minute, func() bool { return rcv.distinct() == 102 })
	after := value(t, scrape(t, base), "walcast_sink_delivery_attempts_total", hook)
	if during < before || afterThrottle < during || after < afterThrottle || after != before+1 {
		t.Errorf("delivery_attempts_total scraped %v before, %v during the throttled request, %v after the throttle, %v after the delivery; "+
			"want a counter that never goes down and grows by 1", before, during, afterThrottle, after)
	}

	if out, err := walcastCLI(t, "pause", pipeline, "--sink", "hook"); err != nil {
		t.Fatalf("walcast pause: %v\n%s", err, out)
	}
	waitFor(t, "the pause gauge", time.Minute, func() bool { return value(t, scrape(t, base), "walcast_sink_paused", hook) == 1 })

	if code, body := healthz(t, base); code != http.StatusOK || body != "ok\nmetrics: leader, streaming\n" {
		t.Fatalf("/healthz: %d %q", code, body)
	}
	want("walcast_leader", map[string]string{"pipeline": "metrics"}, eq(1), "1")
	proc.stop()
}
