package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The outage run of the isolation figures (isolate.go): a steady load
// through two webhook sinks, one of whose receivers goes down and comes
// back, and what the other sink and the source saw meanwhile.

// Outage is the steady run with one receiver down.
type Outage struct {
	Rate        int     `json:"rate_changes_per_sec"`
	DownSeconds float64 `json:"down_seconds"`
	Events      int     `json:"events"`
	// The live sink's commit → arrival latency over the whole run, and of
	// the changes committed while the other receiver was down.
	P50ms       float64 `json:"live_p50_ms"`
	P99ms       float64 `json:"live_p99_ms"`
	Maxms       float64 `json:"live_max_ms"`
	OutageP99ms float64 `json:"live_outage_p99_ms"`
	OutageMaxms float64 `json:"live_outage_max_ms"`
	// The same by phase (commit time): before the outage, while the
	// receiver is back and the sink catches up, after it rejoined.
	BeforeP99ms   float64 `json:"live_before_p99_ms"`
	CatchupP99ms  float64 `json:"live_catchup_p99_ms"`
	RejoinedP99ms float64 `json:"live_rejoined_p99_ms"`
	// FirstDeliverySeconds: receiver back → the down sink's first
	// successful request (its retry backoff).
	FirstDeliverySeconds float64 `json:"first_delivery_seconds"`
	// DetachSeconds: receiver down → catch-up slot created.
	// RejoinSeconds: receiver back → catch-up slot dropped (rejoined).
	DetachSeconds float64 `json:"detach_seconds"`
	RejoinSeconds float64 `json:"rejoin_seconds"`
	// MaxRetainedWAL: the most WAL the pipeline's slot and the catch-up
	// slot retained together (current position − oldest restart_lsn);
	// MaxCatchupRetained: the catch-up slot's own at its worst.
	MaxRetainedWAL     int64 `json:"max_retained_wal_bytes"`
	MaxCatchupRetained int64 `json:"max_catchup_retained_wal_bytes"`
	// The catch-up walsender's CPU while it streamed (wall seconds), and
	// the pipeline's walsender's over the same time.
	CatchupSeconds       float64 `json:"catchup_seconds"`
	CatchupWalsenderCPU  float64 `json:"catchup_walsender_cpu_seconds"`
	PipelineWalsenderCPU float64 `json:"pipeline_walsender_cpu_seconds"`
	// The same while the catch-up slot really streams: from the down
	// sink's first delivery after the outage to its rejoin.
	StreamingSeconds              float64 `json:"streaming_seconds"`
	StreamingCatchupWalsenderCPU  float64 `json:"streaming_catchup_walsender_cpu_seconds"`
	StreamingPipelineWalsenderCPU float64 `json:"streaming_pipeline_walsender_cpu_seconds"`
	// DownDistinct: distinct events the down sink received in the end.
	DownDistinct int `json:"down_distinct"`
	// Timeline: the live sink's latency by 5 s of commit time, from the
	// start of the load (the receiver went down at Warmup).
	Timeline []Window `json:"timeline"`
	// LoadAvg is the machine's 1-minute load average at the end: the
	// figures are only as quiet as the machine was.
	LoadAvg string `json:"loadavg"`
}

// Window is the live sink's latency over one stretch of commit time.
type Window struct {
	FromSeconds float64 `json:"from_seconds"`
	Events      int     `json:"events"`
	P99ms       float64 `json:"p99_ms"`
	Maxms       float64 `json:"max_ms"`
}

// outage runs Rate changes/s through two webhook sinks, the second one's
// receiver down for Down after Warmup, until it has rejoined.
func (e *env) outage(ctx context.Context) (*Outage, error) {
	const name, slot = "iso_outage", "b_iso_outage"
	if err := e.createSlot(ctx, slot); err != nil {
		return nil, err
	}
	live := newIsoReceiver(0)
	live.latency = true
	if err := live.up(""); err != nil {
		return nil, err
	}
	defer live.down()
	flaky := newIsoReceiver(0)
	flaky.distinct = map[string]bool{}
	if err := flaky.up(""); err != nil {
		return nil, err
	}
	defer flaky.down()
	p, err := e.startOutageDaemon(ctx, name, slot, live.url, flaky.url)
	if err != nil {
		return nil, err
	}
	defer p.kill()
	s, stopSampling, err := e.sampleSlots(ctx, name, slot)
	if err != nil {
		return nil, err
	}
	defer stopSampling()
	run, err := e.outageLoad(ctx, p, s, flaky)
	if err != nil {
		return nil, err
	}
	if _, err := live.wait(int64(run.n), p.exited, time.Minute); err != nil {
		return nil, fmt.Errorf("live sink: %w\n%s", err, e.tailLog(name))
	}
	if err := flaky.waitDistinct(run.n, p.exited, 5*time.Minute); err != nil {
		return nil, fmt.Errorf("down sink: %w\n%s", err, e.tailLog(name))
	}
	if err := stopSampling(); err != nil {
		return nil, err
	}
	if err := e.stopDaemon(p); err != nil {
		return nil, err
	}
	if err := e.teardown(ctx, name); err != nil {
		return nil, err
	}
	return e.outageFigures(run, s, live, flaky)
}

// startOutageDaemon starts the outage's pipeline, its two webhook sinks
// posting to liveURL and downURL, and waits for it to stream.
func (e *env) startOutageDaemon(ctx context.Context, name, slot, liveURL, downURL string) (*process, error) {
	// The down sink retries quickly and never parks during the outage,
	// so that it catches up as soon as its receiver is back.
	sinks := fmt.Sprintf(`sink "webhook" "live" {
  config {
    url = %q
  }
}

sink "webhook" "down" {
  delivery {
    retry_base   = "200ms"
    max_attempts = 100000
  }
  config {
    url = %q
  }
}
`, liveURL, downURL)
	poll, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return nil, err
	}
	defer poll.Close(context.Background())
	p, err := e.startDaemon(ctx, daemonRun{name: name, slot: slot, sink: sinks})
	if err != nil {
		return nil, err
	}
	if _, err := e.waitActive(ctx, poll, slot, p.exited); err != nil {
		p.kill()
		return nil, fmt.Errorf("walcast: %w\n%s", err, e.tailLog(name))
	}
	return p, nil
}

// sampleSlots runs a slotSampler of the pipeline's slots on a connection
// of its own until stop, which reports what ended it (nil: stop itself)
// and may be called again.
func (e *env) sampleSlots(ctx context.Context, pipeline, slot string) (*slotSampler, func() error, error) {
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return nil, nil, err
	}
	s := &slotSampler{conn: conn, pipeline: pipeline, slot: slot}
	sctx, cancel := context.WithCancel(ctx)
	sampled := make(chan error, 1)
	go func() { sampled <- s.run(sctx) }()
	stop := sync.OnceValue(func() error {
		cancel()
		err := <-sampled
		conn.Close(context.Background())
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	})
	return s, stop, nil
}

// outageRun is what the outage's load did: when it started, when the
// receiver went down and came back, when the down sink rejoined, and how
// many changes it committed.
type outageRun struct {
	start, downAt, upAt, rejoinedAt time.Time
	n                               int
}

// outageLoad commits Rate changes/s in 10-row transactions, takes flaky
// down after Warmup and back after Down, and goes on until the sampler saw
// the down sink rejoin, and a few seconds more: the live sink's latency
// with both sinks live again counts too.
func (e *env) outageLoad(ctx context.Context, p *process, s *slotSampler, flaky *isoReceiver) (outageRun, error) {
	ic := e.cfg.Isolate
	const txRows = 10
	tick := time.NewTicker(time.Second * txRows / time.Duration(ic.Rate))
	defer tick.Stop()
	lo := int64(e.cfg.Inserts + 200_000_000)
	r := outageRun{start: time.Now()}
	for {
		now := time.Now()
		if err := e.outageStep(&r, now, s, flaky, p.name); err != nil {
			return r, err
		}
		if !r.rejoinedAt.IsZero() && now.Sub(r.rejoinedAt) >= 3*time.Second {
			return r, nil
		}
		if _, err := e.conn.Exec(ctx, insertSQL, lo, lo+txRows-1); err != nil {
			return r, err
		}
		lo += txRows
		r.n += txRows
		select {
		case <-tick.C:
		case <-p.exited:
			return r, fmt.Errorf("walcast exited\n%s", e.tailLog(p.name))
		case <-ctx.Done():
			return r, ctx.Err()
		}
	}
}

// outageStep moves the outage on at now: the receiver goes down, comes
// back, and the down sink's rejoin is noted once the sampler sees it.
func (e *env) outageStep(r *outageRun, now time.Time, s *slotSampler, flaky *isoReceiver, name string) error {
	ic := e.cfg.Isolate
	switch {
	case r.downAt.IsZero() && now.Sub(r.start) >= ic.Warmup:
		e.logf("  outage: receiver down for %s at %d changes/s", ic.Down, ic.Rate)
		flaky.down()
		r.downAt = now
	case !r.downAt.IsZero() && r.upAt.IsZero() && now.Sub(r.downAt) >= ic.Down:
		if err := flaky.up(flaky.addr); err != nil {
			return fmt.Errorf("receiver back: %w", err)
		}
		r.upAt = now
		e.logf("  outage: receiver back")
	case !r.upAt.IsZero() && r.rejoinedAt.IsZero():
		if rj := s.rejoinedAfter(r.upAt); !rj.IsZero() {
			r.rejoinedAt = rj
			e.logf("  outage: rejoined %.1fs after the receiver came back", rj.Sub(r.upAt).Seconds())
		} else if now.Sub(r.upAt) > ic.MaxCatchup {
			return fmt.Errorf("the down sink did not rejoin within %s of its receiver coming back\n%s", ic.MaxCatchup, e.tailLog(name))
		}
	}
	return nil
}

// outageFigures turns the run, the slot samples and the receivers'
// records into the Outage figures.
func (e *env) outageFigures(run outageRun, s *slotSampler, live, flaky *isoReceiver) (*Outage, error) {
	downAt, upAt, rejoinedAt := run.downAt, run.upAt, run.rejoinedAt
	o := &Outage{Rate: e.cfg.Isolate.Rate, DownSeconds: upAt.Sub(downAt).Seconds(), Events: run.n,
		MaxRetainedWAL: s.maxRetained, MaxCatchupRetained: s.maxCatchupRetained,
		CatchupSeconds: s.catchupWall.Seconds(), CatchupWalsenderCPU: s.catchupCPU, PipelineWalsenderCPU: s.mainCPU,
		DownDistinct: flaky.distinctCount()}
	if s.detachedAt.IsZero() {
		return o, errors.New("the down sink never detached")
	}
	o.DetachSeconds = s.detachedAt.Sub(downAt).Seconds()
	o.RejoinSeconds = rejoinedAt.Sub(upAt).Seconds()
	all := live.latencies(time.Time{}, time.Now())
	during := live.latencies(downAt, upAt)
	o.P50ms, o.P99ms, o.Maxms = quantileMs(all, 0.50), quantileMs(all, 0.99), quantileMs(all, 1)
	o.OutageP99ms, o.OutageMaxms = quantileMs(during, 0.99), quantileMs(during, 1)
	o.BeforeP99ms = quantileMs(live.latencies(time.Time{}, downAt), 0.99)
	o.CatchupP99ms = quantileMs(live.latencies(upAt, rejoinedAt), 0.99)
	o.RejoinedP99ms = quantileMs(live.latencies(rejoinedAt, time.Now()), 0.99)
	for from := run.start; from.Before(time.Now()); from = from.Add(5 * time.Second) {
		l := live.latencies(from, from.Add(5*time.Second))
		if len(l) > 0 {
			o.Timeline = append(o.Timeline, Window{FromSeconds: from.Sub(run.start).Seconds(), Events: len(l), P99ms: quantileMs(l, 0.99), Maxms: quantileMs(l, 1)})
		}
	}
	o.LoadAvg = loadAvg()
	if first := flaky.firstAfter(upAt); !first.IsZero() {
		o.FirstDeliverySeconds = first.Sub(upAt).Seconds()
		o.StreamingSeconds, o.StreamingCatchupWalsenderCPU, o.StreamingPipelineWalsenderCPU = s.between(first, rejoinedAt)
	}
	for _, w := range o.Timeline {
		e.logf("    from %3.0fs: %6d events, p99 %7.1f ms, max %7.1f ms", w.FromSeconds, w.Events, w.P99ms, w.Maxms)
	}
	e.logf("  outage: live p50 %.1f ms p99 %.1f ms (during the outage %.1f ms), detached after %.1fs, rejoined %.1fs after, WAL retained at most %d MiB",
		o.P50ms, o.P99ms, o.OutageP99ms, o.DetachSeconds, o.RejoinSeconds, o.MaxRetainedWAL>>20)
	return o, nil
}

// slotSampler watches the pipeline's slots every 250ms: the WAL they
// retain, when the catch-up slot appears and goes, and the CPU of the
// walsenders streaming them.
type slotSampler struct {
	conn     *pgx.Conn
	pipeline string
	slot     string

	mu                 sync.Mutex
	maxRetained        int64
	maxCatchupRetained int64
	detachedAt         time.Time
	gone               []time.Time // samples without a catch-up slot after one existed
	catchupWall        time.Duration
	catchupCPU         float64
	mainCPU            float64
	// cum: the running totals above at each sample, for any stretch.
	cum []cpuSample
}

type cpuSample struct {
	at                  time.Time
	wall                time.Duration
	catchupCPU, mainCPU float64
}

// between returns the catch-up walsender's wall and CPU seconds, and the
// pipeline walsender's CPU, between from and to.
func (s *slotSampler) between(from, to time.Time) (wall, cu, main float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var a, b *cpuSample
	for i := range s.cum {
		c := &s.cum[i]
		if a == nil && !c.at.Before(from) {
			a = c
		}
		if !c.at.After(to) {
			b = c
		}
	}
	if a == nil || b == nil || b.at.Before(a.at) {
		return 0, 0, 0
	}
	return (b.wall - a.wall).Seconds(), b.catchupCPU - a.catchupCPU, b.mainCPU - a.mainCPU
}

func (s *slotSampler) run(ctx context.Context) error {
	type cpuAt struct {
		pid int
		cpu float64
	}
	var lastCU, lastMain cpuAt
	var lastAt time.Time
	seen := false
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		var retained, cuRetained int64
		var cuPID, mainPID int
		var cuCount int
		err := s.conn.QueryRow(ctx, `
SELECT coalesce((pg_current_wal_lsn() - min(s.restart_lsn))::bigint, 0),
       coalesce(max(CASE WHEN c.slot IS NOT NULL THEN pg_current_wal_lsn() - s.restart_lsn END)::bigint, 0),
       coalesce(max(CASE WHEN c.slot IS NOT NULL THEN s.active_pid END), 0),
       coalesce(max(CASE WHEN s.slot_name = $2 THEN s.active_pid END), 0),
       count(c.slot)
FROM pg_replication_slots s
LEFT JOIN walcast.catchup_slots c ON c.slot = s.slot_name AND c.pipeline = $1
WHERE s.slot_name = $2 OR c.slot IS NOT NULL`, s.pipeline, s.slot).Scan(&retained, &cuRetained, &cuPID, &mainPID, &cuCount)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("sample slots: %w", err)
		}
		now := time.Now()
		s.mu.Lock()
		s.maxRetained = max(s.maxRetained, retained)
		s.maxCatchupRetained = max(s.maxCatchupRetained, cuRetained)
		if cuCount > 0 && s.detachedAt.IsZero() {
			s.detachedAt = now
		}
		if cuCount > 0 {
			seen = true
		} else if seen {
			s.gone = append(s.gone, now)
		}
		// CPU: the catch-up walsender's, and the pipeline's over the same
		// intervals (both streaming during them).
		var cu, mn cpuAt
		if cuPID != 0 {
			if u, err := readProc(cuPID); err == nil {
				cu = cpuAt{cuPID, u.CPU}
			}
		}
		if mainPID != 0 {
			if u, err := readProc(mainPID); err == nil {
				mn = cpuAt{mainPID, u.CPU}
			}
		}
		if cu.pid != 0 && cu.pid == lastCU.pid {
			s.catchupCPU += cu.cpu - lastCU.cpu
			s.catchupWall += now.Sub(lastAt)
			if mn.pid != 0 && mn.pid == lastMain.pid {
				s.mainCPU += mn.cpu - lastMain.cpu
			}
		}
		s.cum = append(s.cum, cpuSample{at: now, wall: s.catchupWall, catchupCPU: s.catchupCPU, mainCPU: s.mainCPU})
		s.mu.Unlock()
		lastCU, lastMain, lastAt = cu, mn, now
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// rejoinedAfter is the first time after t the catch-up slot was seen gone
// (zero while it was not).
func (s *slotSampler) rejoinedAfter(t time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.gone {
		if g.After(t) {
			return g
		}
	}
	return time.Time{}
}
