package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/host/internal/delivery/fanout"
	"github.com/walcast/walcast/host/internal/delivery/isolate"
	"github.com/walcast/walcast/host/internal/source/capture"
)

// pipelineCollector reads a running pipeline's counters and gauges when
// Prometheus scrapes, so metrics cost the delivery path nothing but the
// atomics it keeps anyway.
type pipelineCollector struct {
	runs    []*sinkRun
	tracker *ack.Tracker
	fan     *fanout.Fanout
	capt    *capture.Capture

	received, confirmed, streaming, captured *prometheus.Desc
	unlisted, receiveTimeouts                *prometheus.Desc
	sinkCounters                             []sinkCounter
	held, inFlight, queued, unresolved       *prometheus.Desc
	// position is the sink's position, published as
	// walcast_sink_watermark_lsn: the name dashboards and alerts use.
	paused, position, lastSuccess          *prometheus.Desc
	backlogEvents, backlogBytes, oldestAge *prometheus.Desc

	// slotWAL, when set, asks PostgreSQL how much WAL the slot retains.
	slotWAL     func(ctx context.Context) (int64, error)
	retainedWAL *prometheus.Desc

	// Sinks that fall behind (package isolate): each durable sink's mode,
	// how far its catch-up stream is behind, and the WAL its catch-up
	// slot retains (catchupWAL: by sink, read at scrape time).
	mode, catchupBehind, catchupWAL, catchupTimeouts *prometheus.Desc
	catchupRetained                                  func(ctx context.Context) (map[string]int64, error)
}

// slotQueryTimeout bounds the PostgreSQL query a scrape makes; a scrape
// that cannot get an answer in time goes without the slot's figure.
const slotQueryTimeout = 2 * time.Second

type sinkCounter struct {
	desc  *prometheus.Desc
	value func(*sinkRun) float64
}

func newPipelineCollector(runs []*sinkRun, tracker *ack.Tracker, fan *fanout.Fanout, capt *capture.Capture,
	slotWAL func(ctx context.Context) (int64, error)) *pipelineCollector {
	sink := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("walcast_sink_"+name, help, []string{"sink", "type"}, nil)
	}
	counter := func(name, help string, v func(*sinkRun) float64) sinkCounter {
		return sinkCounter{sink(name, help), v}
	}
	return &pipelineCollector{
		runs: runs, tracker: tracker, fan: fan, capt: capt, slotWAL: slotWAL,
		retainedWAL: prometheus.NewDesc("walcast_slot_retained_wal_bytes",
			"WAL PostgreSQL keeps for the replication slot: pg_current_wal_lsn() - restart_lsn, read from PostgreSQL at scrape time.", nil, nil),
		received:  prometheus.NewDesc("walcast_received_lsn", "Highest WAL position received from the replication slot.", nil, nil),
		confirmed: prometheus.NewDesc("walcast_confirmed_flush_lsn", "WAL position walcast may confirm to PostgreSQL: every durable sink resolved everything below it.", nil, nil),
		streaming: prometheus.NewDesc("walcast_streaming", "1 while the replication stream is up, 0 while reconnecting.", nil, nil),
		captured:  prometheus.NewDesc("walcast_events_captured_total", "Change events read from the slot and fanned out to the sinks.", nil, nil),
		unlisted:  prometheus.NewDesc("walcast_events_unlisted_total", "Changes of tables not in source.tables that the publication sent and walcast dropped.", nil, nil),
		receiveTimeouts: prometheus.NewDesc("walcast_stream_receive_timeouts_total",
			"Replication streams ended and reconnected because nothing, not even a keepalive asked for, arrived from PostgreSQL within the receive timeout.", nil, nil),
		sinkCounters: []sinkCounter{
			counter("events_delivered_total", "Events a Deliver call resolved successfully (not counting duplicates the sink recognised).",
				func(r *sinkRun) float64 { return float64(r.stats().Delivered.Load()) }),
			counter("delivered_bytes_total", "Envelope bytes of successfully delivered events.",
				func(r *sinkRun) float64 { return float64(r.stats().Bytes.Load()) }),
			counter("duplicates_total", "Events the sink reported as already delivered.",
				func(r *sinkRun) float64 { return float64(r.stats().Duplicates.Load()) }),
			counter("delivery_attempts_total", "Deliver calls, excluding throttled ones.",
				func(r *sinkRun) float64 { return float64(r.stats().Attempts.Load()) }),
			counter("delivery_failures_total", "Deliver calls that failed (retryable, permanent or fatal).",
				func(r *sinkRun) float64 { return float64(r.stats().Failures.Load()) }),
			counter("throttles_total", "Deliver calls the destination throttled.",
				func(r *sinkRun) float64 { return float64(r.stats().Throttles.Load()) }),
			counter("events_parked_total", "Events parked in walcast.parked after max_attempts or behind a parked event of their row.",
				func(r *sinkRun) float64 { return float64(r.stats().Parked.Load()) }),
			counter("events_replayed_total", "Parked events delivered by walcast replay.",
				func(r *sinkRun) float64 { return float64(r.stats().Replayed.Load()) }),
			counter("events_filtered_total", "Events resolved without delivery because the sink's tables/ops filter excludes them.",
				func(r *sinkRun) float64 { return float64(r.stats().Filtered.Load()) }),
			counter("events_skipped_total", "Replayed events at or below the sink's checkpoint, resolved without delivery.",
				func(r *sinkRun) float64 { return float64(r.stats().Skipped.Load()) }),
			counter("events_dropped_total", "Events a non-durable sink's full queue dropped.",
				func(r *sinkRun) float64 { return float64(r.queue.Dropped()) }),
		},
		held:        sink("held_events", "Events the sink's scheduler holds: pending, backing off or in flight."),
		inFlight:    sink("in_flight_batches", "Deliver calls in flight."),
		queued:      sink("queued_events", "Events in the sink's queue, not yet taken by its scheduler."),
		unresolved:  sink("unresolved_events", "Events fanned out to the sink and not yet delivered, filtered, skipped or parked."),
		paused:      sink("paused", "1 while the sink is paused by walcast pause."),
		position:    sink("watermark_lsn", "Commit LSN of the sink's watermark: everything at or below it is resolved."),
		lastSuccess: sink("last_success_timestamp_seconds", "Unix time of the sink's last successful Deliver (0: none since start)."),
		backlogEvents: sink("backlog_events",
			"Events captured and not yet resolved (delivered, filtered, skipped, parked or dropped) for the sink."),
		backlogBytes: sink("backlog_bytes", "Envelope bytes of the sink's backlog events."),
		mode: prometheus.NewDesc("walcast_sink_mode",
			"1 for the durable sink's current mode: live, catching_up (detached, reading its own catch-up slot) or rejoining.",
			[]string{"sink", "type", "mode"}, nil),
		catchupBehind: sink("catchup_behind_bytes", "WAL bytes the sink's catch-up stream is behind the pipeline's stream; 0 when live."),
		catchupWAL:    sink("catchup_slot_retained_wal_bytes", "WAL the sink's catch-up slot retains (pg_current_wal_lsn() - restart_lsn); 0 when it has none."),
		catchupTimeouts: sink("catchup_receive_timeouts_total",
			"The sink's catch-up streams ended and reconnected because nothing arrived from PostgreSQL within the receive timeout."),
		oldestAge: sink("oldest_unresolved_age_seconds",
			"Seconds since walcast read the sink's oldest unresolved event from the slot; 0 with an empty backlog."),
	}
}

func (c *pipelineCollector) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(c, ch)
}

func (c *pipelineCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(c.received, float64(c.capt.Received()))
	gauge(c.confirmed, float64(c.tracker.Flush()))
	streaming := 0.0
	if c.capt.Streaming() {
		streaming = 1
	}
	gauge(c.streaming, streaming)
	ch <- prometheus.MustNewConstMetric(c.captured, prometheus.CounterValue, float64(c.fan.Events()))
	ch <- prometheus.MustNewConstMetric(c.unlisted, prometheus.CounterValue, float64(c.capt.Unlisted()))
	ch <- prometheus.MustNewConstMetric(c.receiveTimeouts, prometheus.CounterValue, float64(c.capt.ReceiveTimeouts().Count()))
	if c.slotWAL != nil {
		ctx, cancel := context.WithTimeout(context.Background(), slotQueryTimeout)
		if n, err := c.slotWAL(ctx); err == nil {
			gauge(c.retainedWAL, float64(n))
		}
		cancel()
	}
	now := time.Now()

	var retainedBySink map[string]int64
	if c.catchupRetained != nil {
		ctx, cancel := context.WithTimeout(context.Background(), slotQueryTimeout)
		retainedBySink, _ = c.catchupRetained(ctx)
		cancel()
	}
	positions := c.tracker.Positions()
	for i, r := range c.runs {
		l := []string{r.cfg.ID, r.cfg.Type}
		for _, sc := range c.sinkCounters {
			ch <- prometheus.MustNewConstMetric(sc.desc, prometheus.CounterValue, sc.value(r), l...)
		}
		st := r.stats()
		gauge(c.held, float64(st.Held.Load()), l...)
		gauge(c.inFlight, float64(st.InFlight.Load()), l...)
		gauge(c.queued, float64(len(r.queue.C)), l...)
		gauge(c.unresolved, float64(c.tracker.Pending(i)), l...)
		paused := 0.0
		if r.scheduler().Paused() {
			paused = 1
		}
		gauge(c.paused, paused, l...)
		gauge(c.position, float64(positions[i].CommitLSN), l...)
		last := 0.0
		if ns := st.LastSuccess.Load(); ns > 0 {
			last = float64(ns) / 1e9
		}
		gauge(c.lastSuccess, last, l...)
		events, bytes, oldest := sinkBacklog(c.tracker, i, r)
		if r.isolation != nil {
			cur := r.isolation.Mode()
			for _, m := range []isolate.Mode{isolate.Live, isolate.CatchingUp, isolate.Rejoining} {
				v := 0.0
				if m == cur {
					v = 1
				}
				gauge(c.mode, v, r.cfg.ID, r.cfg.Type, m.String())
			}
			behind, _ := r.isolation.Lag()
			gauge(c.catchupBehind, float64(behind), l...)
			gauge(c.catchupWAL, float64(retainedBySink[r.cfg.ID]), l...)
			ch <- prometheus.MustNewConstMetric(c.catchupTimeouts, prometheus.CounterValue, float64(r.isolation.ReceiveTimeouts().Count()), l...)
		}
		gauge(c.backlogEvents, float64(events), l...)
		gauge(c.backlogBytes, float64(bytes), l...)
		age := 0.0
		if !oldest.IsZero() {
			age = max(now.Sub(oldest).Seconds(), 0)
		}
		gauge(c.oldestAge, age, l...)
	}
}

// sinkBacklog is what sink i still has to resolve: from the live stream's
// tracker, or, while the sink is detached, from its catch-up stream (whose
// oldest event's age is not tracked).
func sinkBacklog(tracker *ack.Tracker, i int, r *sinkRun) (events int, bytes int64, oldest time.Time) {
	if r.isolation != nil {
		if e, b, ok := r.isolation.Backlog(); ok {
			return e, b, time.Time{}
		}
	}
	return tracker.Backlog(i)
}

// deliverSeconds is the Deliver latency histogram, by sink (and its type,
// like every sink series) and outcome.
func newDeliverSeconds() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "walcast_sink_deliver_duration_seconds",
		Help:    "How long Deliver calls took, by outcome (ok, retryable, throttled, permanent, fatal).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 120},
	}, []string{"sink", "type", "outcome"})
}

// slotRetainedWAL returns a function reading how many bytes of WAL the
// slot holds back, as `walcast status` shows it.
func slotRetainedWAL(pool *pgxpool.Pool, slot string) func(ctx context.Context) (int64, error) {
	return func(ctx context.Context) (int64, error) {
		var n int64
		err := pool.QueryRow(ctx, `
SELECT coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint
FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&n)
		if err != nil {
			return 0, fmt.Errorf("read retained WAL of slot %s: %w", slot, err)
		}
		return n, nil
	}
}

// serveMetrics serves /metrics and /healthz on addr until the returned
// stop is called, which shuts the server down and waits for it. It returns
// once the listener is bound, so a bad address fails the start. One server
// serves every pipeline of the process; the instance calls stop last, so
// that a graceful drain stays observable.
func serveMetrics(addr string, g prometheus.Gatherer, health func() (bool, string), log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		ok, text := health()
		if !ok {
			http.Error(w, text, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, text)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Info("serving metrics", "addr", ln.Addr().String())
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics server stopped", "err", err)
		}
	}()
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		<-served
	}, nil
}

// newRegistry returns a registry with one pipeline's metrics, every series
// labelled with the pipeline. The process's own metrics are the
// instance's (see instance.gatherer).
func newRegistry(pipeline string, c prometheus.Collector, deliver *prometheus.HistogramVec, more ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	wrapped := prometheus.WrapRegistererWith(prometheus.Labels{"pipeline": pipeline}, reg)
	wrapped.MustRegister(append([]prometheus.Collector{c, deliver}, more...)...)
	return reg
}

// gatherer gathers the process's metrics, each pipeline's role, and the
// metrics of every pipeline this process leads now.
func (in *instance) gatherer() prometheus.Gatherer {
	base := prometheus.NewRegistry()
	base.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), roleCollector{in})
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		gs := prometheus.Gatherers{base}
		for _, ps := range in.states {
			if _, _, t := ps.get(); t != nil {
				gs = append(gs, t.reg)
			}
		}
		return gs.Gather()
	})
}

var (
	leaderDesc = prometheus.NewDesc("walcast_leader",
		"1 while this process leads the pipeline (streams it), 0 while it stands by or the pipeline stopped.", []string{"pipeline"}, nil)
	failedDesc = prometheus.NewDesc("walcast_pipeline_failed",
		"1 once the pipeline stopped for good on an error (the process's other pipelines go on).", []string{"pipeline"}, nil)
)

// roleCollector reports each pipeline's role in this process.
type roleCollector struct{ in *instance }

func (c roleCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- leaderDesc
	ch <- failedDesc
}

func (c roleCollector) Collect(ch chan<- prometheus.Metric) {
	for _, ps := range c.in.states {
		role, _, _ := ps.get()
		lead, failed := 0.0, 0.0
		if role == roleLeader {
			lead = 1
		}
		if role == roleFailed {
			failed = 1
		}
		ch <- prometheus.MustNewConstMetric(leaderDesc, prometheus.GaugeValue, lead, ps.p.Name)
		ch <- prometheus.MustNewConstMetric(failedDesc, prometheus.GaugeValue, failed, ps.p.Name)
	}
}

// streamHealth is what /healthz says of a leader's replication streams:
// "streaming", with how many silent streams were ended and reconnected
// (the pipeline's, then each detached sink's catch-up stream); an error
// while the pipeline's stream is down, or silent with the keepalive it
// asked for unanswered for most of the receive timeout.
func (t *term) streamHealth() (string, error) {
	c := t.capt
	if !c.Streaming() {
		return "", errors.New("replication stream down: connecting or reconnecting to PostgreSQL")
	}
	silent, timeout := c.Silence()
	if silent >= timeout*3/4 && silent > 0 {
		return "", fmt.Errorf("replication stream silent for %s: nothing from PostgreSQL, not even the keepalive asked for; it is ended and reconnected at %s of silence (receive_timeout)",
			silent.Round(time.Second), timeout)
	}
	var b strings.Builder
	b.WriteString("streaming")
	writeTimeouts(&b, "", c.ReceiveTimeouts(), timeout)
	for _, r := range t.runs {
		if r.isolation == nil {
			continue
		}
		_, _, cuTimeout := r.isolation.CatchupStream()
		writeTimeouts(&b, "catch-up stream of sink "+r.cfg.ID+": ", r.isolation.ReceiveTimeouts(), cuTimeout)
	}
	return b.String(), nil
}

// writeTimeouts appends "; <what>N silent stream(s) ended and
// reconnected, the last at T" when there were any.
func writeTimeouts(b *strings.Builder, what string, rt *capture.ReceiveTimeouts, timeout time.Duration) {
	n := rt.Count()
	if n == 0 {
		return
	}
	streams := "streams"
	if n == 1 {
		streams = "stream"
	}
	fmt.Fprintf(b, "; %s%d silent %s ended and reconnected", what, n, streams)
	if timeout > 0 {
		fmt.Fprintf(b, " (receive_timeout %s)", timeout)
	}
	fmt.Fprintf(b, ", the last at %s", rt.Last().UTC().Format(time.RFC3339))
}

// health is /healthz: "ok" and a line per pipeline (leader, streaming;
// standby; ...) while every pipeline is a streaming leader or a standby;
// 503 with the same lines when a pipeline failed or a leader's stream is
// down (connecting, reconnecting).
func (in *instance) health() (bool, string) {
	ok := true
	var b strings.Builder
	for _, ps := range in.states {
		role, err, t := ps.get()
		line := role
		switch {
		case role == roleLeader && t == nil:
			ok, line = false, "leader, starting"
		case role == roleLeader:
			if state, herr := t.streamHealth(); herr != nil {
				ok, line = false, "leader, "+herr.Error()
			} else {
				line = "leader, " + state
			}
		case role == roleFailed:
			ok, line = false, "failed: "+err.Error()
		}
		fmt.Fprintf(&b, "%s: %s\n", ps.p.Name, line)
	}
	if ok {
		return true, "ok\n" + b.String()
	}
	return false, "unhealthy\n" + b.String()
}
