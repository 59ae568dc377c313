package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// needPrometheus returns the path of Debian's prometheus server (the
// package that also ships promtool). In CI (CI=true) a missing one fails
// the test: `make tools` installs it.
func needPrometheus(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("prometheus not found in CI: the Makefile's tools target installs it (apt-get install -y prometheus)")
		}
		t.Skip("prometheus not found: run `make tools` (apt-get install -y prometheus) to scrape walcast with a real server")
	}
	return p
}

// promAlert is one alert as Prometheus's /api/v1/alerts lists it.
type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// TestPrometheusScrapesAndAlerts: a real Prometheus server scrapes walcast
// and evaluates the README's alert rules (thresholds and durations scaled
// down to seconds): on a healthy pipeline of a cluster that keeps writing
// WAL nothing fires; when the receiver fails, WalcastSinkBehind fires for
// that sink with its labels; every series the rules use is scraped.
func TestPrometheusScrapesAndAlerts(t *testing.T) {
	prometheus := needPrometheus(t)
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	exec1(t, db, `CREATE TABLE other (id serial PRIMARY KEY, pad text)`) // not captured: WAL only
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "prom", dsn, []string{"public.items"},
		sinkSpec{ID: "hook", URL: rcv.URL, Batch: 10, Extra: "    retry_base = \"50ms\"\n    max_attempts = 1000\n"})
	proc := startWalcast(t, pipeline, "--metrics-listen", "127.0.0.1:0")
	target := strings.TrimPrefix(metricsBase(t, proc), "http://")
	waitSlot(t, db, "walcast_prom")

	// The README's rules, made to act within seconds.
	rules, err := os.ReadFile("../../examples/prometheus/walcast-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	fast := string(rules)
	for old, repl := range map[string]string{
		"walcast_sink_oldest_unresolved_age_seconds > 300":             "walcast_sink_oldest_unresolved_age_seconds > 1",
		"(time() - walcast_sink_last_success_timestamp_seconds) > 600": "(time() - walcast_sink_last_success_timestamp_seconds) > 2",
	} {
		if !strings.Contains(fast, old) {
			t.Fatalf("the alert rules no longer contain %q: update this test", old)
		}
		fast = strings.ReplaceAll(fast, old, repl)
	}
	fast = regexp.MustCompile(`for: \d+m`).ReplaceAllString(fast, "for: 1s")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yml"), []byte(fast), 0o644); err != nil {
		t.Fatal(err)
	}
	promCfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [rules.yml]
scrape_configs:
  - job_name: walcast
    static_configs:
      - targets: [%q]
`, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(promCfg), 0o644); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(freeAddr(t))
	startLogged(t, exec.Command(prometheus, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:"+port, "--log.level=warn"), "prometheus")
	api := "http://127.0.0.1:" + port + "/api/v1/"
	get := func(path string, into any) bool {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var env struct {
			Status string          `json:"status"`
			Data   json.RawMessage `json:"data"`
		}
		if json.NewDecoder(resp.Body).Decode(&env) != nil || env.Status != "success" {
			return false
		}
		return json.Unmarshal(env.Data, into) == nil
	}
	// query returns the series of an instant query, labels and value.
	query := func(q string) map[string]string {
		var data struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		}
		if !get("query?query="+url.QueryEscape(q), &data) || len(data.Result) == 0 {
			return nil
		}
		r := data.Result[0]
		r.Metric["value"] = fmt.Sprint(r.Value[1])
		return r.Metric
	}
	alerts := func() []promAlert {
		var data struct {
			Alerts []promAlert `json:"alerts"`
		}
		get("alerts", &data)
		return data.Alerts
	}
	// evaluated returns when Prometheus last evaluated the rules, so that
	// "nothing fired" is checked after the rules ran on data.
	evaluated := func() time.Time {
		var data struct {
			Groups []struct {
				LastEvaluation time.Time `json:"lastEvaluation"`
			} `json:"groups"`
		}
		if !get("rules", &data) || len(data.Groups) == 0 {
			return time.Time{}
		}
		return data.Groups[0].LastEvaluation
	}

	// Healthy: the captured table is delivered while another table keeps
	// the cluster's WAL moving.
	exec1(t, db, `INSERT INTO items SELECT g, 0 FROM generate_series(1, 50) g`)
	waitFor(t, "50 events", time.Minute, func() bool { return rcv.distinct() == 50 })
	waitFor(t, "Prometheus to scrape the backlog gauge", 2*time.Minute, func() bool {
		return query(`walcast_sink_backlog_events{sink="hook"}`) != nil
	})
	since := time.Now().Add(5 * time.Second)
	waitFor(t, "5 s of rule evaluations on a busy cluster", time.Minute, func() bool {
		exec1(t, db, `INSERT INTO other (pad) SELECT repeat('x', 1000) FROM generate_series(1, 100)`)
		return evaluated().After(since)
	})
	for _, a := range alerts() {
		t.Errorf("healthy pipeline: alert %s is %s (%v)", a.Labels["alertname"], a.State, a.Labels)
	}
	for _, q := range []string{
		`walcast_sink_backlog_events{sink="hook"}`, `walcast_sink_backlog_bytes{sink="hook"}`,
		`walcast_sink_oldest_unresolved_age_seconds{sink="hook"}`, `walcast_slot_retained_wal_bytes`,
		`walcast_sink_deliver_duration_seconds_count{sink="hook",outcome="ok"}`,
	} {
		r := query(q)
		if r == nil {
			t.Errorf("Prometheus has no series for %s", q)
			continue
		}
		t.Logf("prometheus: %s = %s %v", q, r["value"], r)
	}
	// What the old README measured lag with, written so that it returns
	// something: it is not zero on this healthy pipeline.
	if r := query(`walcast_received_lsn - ignoring(sink, type) group_right walcast_sink_watermark_lsn`); r != nil {
		t.Logf("prometheus: received_lsn - watermark_lsn on the healthy pipeline = %s bytes, backlog 0", r["value"])
	}
	if r := query(`walcast_sink_deliver_duration_seconds_count{sink="hook",outcome="ok"}`); r != nil && r["type"] != "webhook" {
		t.Errorf("latency histogram without type=webhook: %v", r)
	}

	// The receiver fails: the update waits and ages, and the alert fires.
	rcv.setMode(modeFail)
	exec1(t, db, `UPDATE items SET v = 1 WHERE id = 1`)
	var fired promAlert
	waitFor(t, "WalcastSinkBehind to fire", 2*time.Minute, func() bool {
		for _, a := range alerts() {
			if a.Labels["alertname"] == "WalcastSinkBehind" && a.State == "firing" {
				fired = a
				return true
			}
		}
		return false
	})
	if fired.Labels["sink"] != "hook" || fired.Labels["type"] != "webhook" || fired.Labels["pipeline"] != "prom" {
		t.Errorf("WalcastSinkBehind labels %v, want sink hook, type webhook, pipeline prom", fired.Labels)
	}
	t.Logf("prometheus alert while the receiver fails: %v", fired.Labels)
	rcv.setMode(modeOK)
	waitFor(t, "the update after recovery", time.Minute, func() bool { return rcv.distinct() == 51 })
	proc.stop()
}
