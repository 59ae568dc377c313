package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// The isolation figures (path "isolate"): a slow or failing durable sink
// is detached onto a catch-up slot of its own, so the other sinks of its
// pipeline keep their pace (README, "Sinks that fall behind").
//
//   - Drain: IsolateConfig.Changes changes wait in a slot; the daemon
//     drains them with a stdout sink alone, then with the stdout sink next
//     to a webhook whose receiver takes SlowDelay per request. The figure
//     is the stdout sink's drain time (t0: the walsender is active; t1: the
//     sink wrote the last change), next to the slow one over alone.
//   - Outage: Rate changes/s through two webhook sinks; after Warmup the
//     second one's receiver refuses connections for Down, then comes back.
//     Figures: the first sink's commit → arrival latency (all of it, and
//     of the changes committed during the outage), when the down sink
//     detached and when it rejoined, the most WAL the pipeline's slots
//     retained at once, and the CPU of the walsender streaming the
//     catch-up slot next to the pipeline's own walsender over the same
//     time.

// IsolateConfig sizes the isolation figures.
type IsolateConfig struct {
	// Changes drained by the stdout sink, alone and next to the slow one.
	Changes int
	// SlowDelay is the slow webhook receiver's time per request.
	SlowDelay time.Duration
	// Rate is the steady changes/s of the outage run.
	Rate int
	// Warmup runs before the receiver goes down; Down is how long it
	// refuses connections.
	Warmup, Down time.Duration
	// MaxCatchup bounds how long the down sink may take to rejoin after
	// its receiver is back.
	MaxCatchup time.Duration
}

// DefaultIsolate is the size.
func DefaultIsolate() IsolateConfig {
	return IsolateConfig{Changes: 300_000, SlowDelay: 2 * time.Second, Rate: 2000,
		Warmup: 10 * time.Second, Down: 60 * time.Second, MaxCatchup: 10 * time.Minute}
}

// scale shrinks the workload and the outage by f, but never below what
// still makes the slow sink detach (a few thousand changes, seconds of
// outage at Rate), so that a tiny run exercises detach, catch-up and
// rejoin all the same.
func (c IsolateConfig) scale(f float64) IsolateConfig {
	c.Changes = max(int(float64(c.Changes)*f), 5000)
	c.Warmup = max(time.Duration(float64(c.Warmup)*f), time.Second)
	c.Down = max(time.Duration(float64(c.Down)*f), 3*time.Second)
	return c
}

// Isolate is what the isolation run measured.
type Isolate struct {
	Changes int `json:"changes"`
	// AloneSeconds and WithSlowSeconds: the stdout sink's drain time
	// alone and next to the slow webhook; Ratio = with slow / alone.
	// (Medians of the runs; the runs are listed too.)
	AloneSeconds    float64   `json:"alone_seconds"`
	WithSlowSeconds float64   `json:"with_slow_seconds"`
	Ratio           float64   `json:"ratio"`
	AloneRuns       []float64 `json:"alone_runs"`
	WithSlowRuns    []float64 `json:"with_slow_runs"`
	// LoadAvg: the machine's load average after each run (alone, paired).
	LoadAvg []string `json:"loadavg"`
	// The longest the stdout sink waited for its next events, per run:
	// alone, and next to the slow sink (where it includes detach_after
	// and the detachment). Less at the mercy of a busy machine than the
	// drain times.
	AloneMaxGapMs    []float64 `json:"alone_max_gap_ms"`
	WithSlowMaxGapMs []float64 `json:"with_slow_max_gap_ms"`
	SlowDelayMs      float64   `json:"slow_delay_ms"`
	// SlowDelivered: events the slow sink had received when the fast one
	// was done; SlowDetached: whether it was detached by then (last run).
	SlowDelivered int64 `json:"slow_delivered"`
	SlowDetached  bool  `json:"slow_detached"`

	Outage *Outage `json:"outage"`
}

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

// isolate runs both isolation measurements.
func (e *env) isolate(ctx context.Context) (*Isolate, error) {
	ic := e.cfg.Isolate
	res := &Isolate{Changes: ic.Changes, SlowDelayMs: float64(ic.SlowDelay.Milliseconds())}
	// Every slot exists before the workload: each holds all of it.
	runs := max(e.cfg.Runs, 1)
	for i := range runs {
		for _, s := range []string{"alone", "pair"} {
			if err := e.createSlot(ctx, fmt.Sprintf("b_iso_%s_%d", s, i)); err != nil {
				return nil, err
			}
		}
	}
	base := int64(e.cfg.Inserts + 100_000_000)
	e.logf("isolate: %d inserts in %d-row transactions", ic.Changes, e.cfg.TxSize)
	for lo := int64(0); lo < int64(ic.Changes); lo += int64(e.cfg.TxSize) {
		hi := min(lo+int64(e.cfg.TxSize), int64(ic.Changes)) - 1
		if _, err := e.conn.Exec(ctx, insertSQL, base+lo, base+hi); err != nil {
			return nil, fmt.Errorf("isolate workload: %w", err)
		}
	}
	slow := newIsoReceiver(ic.SlowDelay)
	if err := slow.up(""); err != nil {
		return nil, err
	}
	defer slow.down()
	// Alone and paired runs interleave, so that a busy moment of the
	// machine weighs on both alike.
	for i := range runs {
		alone, err := e.isoDrain(ctx, i, nil)
		if err != nil {
			return nil, fmt.Errorf("stdout alone: %w", err)
		}
		e.logf("  run %d/%d: stdout alone: %.2fs, longest wait %s (load %s)", i+1, runs, alone.seconds, alone.maxGap.Round(time.Millisecond), alone.load)
		from := slow.events.Load()
		pair, err := e.isoDrain(ctx, i, slow)
		if err != nil {
			return nil, fmt.Errorf("stdout next to a slow webhook: %w", err)
		}
		pair.slowGot -= from
		e.logf("  run %d/%d: stdout next to a %s-per-request webhook: %.2fs (%.2fx), longest wait %s (load %s); the slow sink had %d events, detached %v",
			i+1, runs, ic.SlowDelay, pair.seconds, pair.seconds/alone.seconds, pair.maxGap.Round(time.Millisecond), pair.load, pair.slowGot, pair.detached)
		res.LoadAvg = append(res.LoadAvg, alone.load, pair.load)
		res.AloneMaxGapMs = append(res.AloneMaxGapMs, float64(alone.maxGap.Microseconds())/1000)
		res.WithSlowMaxGapMs = append(res.WithSlowMaxGapMs, float64(pair.maxGap.Microseconds())/1000)
		res.AloneRuns = append(res.AloneRuns, alone.seconds)
		res.WithSlowRuns = append(res.WithSlowRuns, pair.seconds)
		res.SlowDelivered, res.SlowDetached = pair.slowGot, pair.detached
	}
	res.AloneSeconds, res.WithSlowSeconds = medianOf(res.AloneRuns), medianOf(res.WithSlowRuns)
	res.Ratio = res.WithSlowSeconds / res.AloneSeconds
	var err error
	if res.Outage, err = e.outage(ctx); err != nil {
		return res, fmt.Errorf("outage: %w", err)
	}
	return res, nil
}

type isoDrainResult struct {
	maxGap   time.Duration
	load     string
	seconds  float64
	slowGot  int64
	detached bool
}

// isoDrain drains slot with a stdout sink writing into a FIFO the bench
// counts, next to a webhook sink posting to slow when it is set.
func (e *env) isoDrain(ctx context.Context, run int, slow *isoReceiver) (isoDrainResult, error) {
	var r isoDrainResult
	name := fmt.Sprintf("iso_alone_%d", run)
	if slow != nil {
		name = fmt.Sprintf("iso_pair_%d", run)
	}
	slot := "b_" + name
	fifo := filepath.Join(e.work, name+".fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		return r, fmt.Errorf("mkfifo: %w", err)
	}
	// Read-write, so that opening it blocks neither side and the reader
	// never sees EOF while the plugin (re)opens it.
	f, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		return r, err
	}
	var lines lineCounter
	go lines.count(f)
	defer f.Close()
	sinks := fmt.Sprintf(`sink "stdout" "fast" {
  config {
    path = %q
  }
}
`, fifo)
	if slow != nil {
		sinks += fmt.Sprintf(`
sink "webhook" "slow" {
  config {
    url     = %q
    timeout = "30s"
  }
}
`, slow.url)
	}
	poll, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return r, err
	}
	defer poll.Close(context.Background())
	d := daemonRun{name: name, slot: slot, sink: sinks}
	p, err := e.startDaemon(ctx, d)
	if err != nil {
		return r, err
	}
	defer p.kill()
	t0, err := e.waitActive(ctx, poll, slot, p.exited)
	if err != nil {
		return r, fmt.Errorf("walcast: %w\n%s", err, e.tailLog(name))
	}
	t1, err := lines.wait(int64(e.cfg.Isolate.Changes), p.exited, drainTimeout)
	if err != nil {
		return r, fmt.Errorf("walcast: %w\n%s", err, e.tailLog(name))
	}
	r.seconds = t1.Sub(t0).Seconds()
	r.load = loadAvg()
	lines.mu.Lock()
	r.maxGap = lines.maxGap
	lines.mu.Unlock()
	if slow != nil {
		r.slowGot = slow.events.Load()
		n, err := e.catchupSlots(ctx, poll, name)
		if err != nil {
			return r, err
		}
		r.detached = n > 0
	}
	if err := e.stopDaemon(p); err != nil {
		return r, err
	}
	return r, e.teardown(ctx, name)
}

// catchupSlots counts the catch-up slots walcast recorded for pipeline.
func (e *env) catchupSlots(ctx context.Context, conn *pgx.Conn, pipeline string) (int, error) {
	var n int
	err := conn.QueryRow(ctx, `SELECT count(*) FROM walcast.catchup_slots c JOIN pg_replication_slots s ON s.slot_name = c.slot WHERE c.pipeline = $1`, pipeline).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read catch-up slots: %w", err)
	}
	return n, nil
}

// teardown removes what the pipeline left (its slot, catch-up slots,
// control-plane rows) with walcast teardown, once its walsenders let go.
func (e *env) teardown(ctx context.Context, pipeline string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		cmd := exec.CommandContext(ctx, filepath.Join(e.cfg.BinDir, "walcast"), "teardown", filepath.Join(e.work, pipeline+".hcl"), "--yes", "--force")
		out, err := cmd.CombinedOutput()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("walcast teardown: %w\n%s", err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
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

func medianOf(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v) == 0 {
		return 0
	}
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func quantileMs(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return float64(d[min(int(q*float64(len(d))), len(d)-1)].Microseconds()) / 1000
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

// isoReceiver is a webhook endpoint that can go down (connection refused)
// and come back on the same address, answer after a delay, record each
// event's commit → arrival latency, and count distinct events.
type isoReceiver struct {
	delay    time.Duration
	latency  bool
	url      string
	addr     string
	events   atomic.Int64
	distinct map[string]bool // nil: not counted

	mu     sync.Mutex
	srv    *http.Server
	commit []time.Time
	lat    []time.Duration
	ok     []time.Time // when each request was answered
	target int64
	done   chan time.Time
}

func newIsoReceiver(delay time.Duration) *isoReceiver {
	return &isoReceiver{delay: delay, done: make(chan time.Time, 1), target: -1}
}

// up listens on addr ("" for a new port).
func (r *isoReceiver) up(addr string) error {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	r.addr = ln.Addr().String()
	r.url = "http://" + r.addr + "/hook"
	srv := &http.Server{Handler: http.HandlerFunc(r.serve)}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
	go srv.Serve(ln)
	return nil
}

// down closes the listener and every connection: requests are refused.
func (r *isoReceiver) down() {
	r.mu.Lock()
	srv := r.srv
	r.srv = nil
	r.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

func (r *isoReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if r.delay > 0 {
		select {
		case <-time.After(r.delay):
		case <-req.Context().Done():
			return
		}
	}
	now := time.Now()
	var n int64
	if r.latency || r.distinct != nil {
		var b struct {
			Events []struct {
				ID         string    `json:"id"`
				CommitTime time.Time `json:"commit_time"`
			} `json:"events"`
		}
		if err := json.Unmarshal(body, &b); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n = int64(len(b.Events))
		r.mu.Lock()
		for _, ev := range b.Events {
			if r.latency {
				r.commit = append(r.commit, ev.CommitTime)
				r.lat = append(r.lat, now.Sub(ev.CommitTime))
			}
			if r.distinct != nil {
				r.distinct[ev.ID] = true
			}
		}
		r.mu.Unlock()
	} else {
		n = int64(bytes.Count(body, eventMark))
	}
	total := r.events.Add(n)
	r.mu.Lock()
	r.ok = append(r.ok, now)
	if t := r.target; t >= 0 && total >= t && total-n < t {
		r.done <- now
	}
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// wait returns when n events arrived.
func (r *isoReceiver) wait(n int64, exited <-chan struct{}, timeout time.Duration) (time.Time, error) {
	r.mu.Lock()
	r.target = n
	r.mu.Unlock()
	if r.events.Load() >= n {
		return time.Now(), nil
	}
	select {
	case t := <-r.done:
		return t, nil
	case <-exited:
		return time.Time{}, fmt.Errorf("the daemon exited after %d of %d events", r.events.Load(), n)
	case <-time.After(timeout):
		return time.Time{}, fmt.Errorf("%d of %d events arrived within %s", r.events.Load(), n, timeout)
	}
}

func (r *isoReceiver) distinctCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.distinct)
}

// waitDistinct polls until n distinct events arrived.
func (r *isoReceiver) waitDistinct(n int, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for r.distinctCount() < n {
		select {
		case <-exited:
			return fmt.Errorf("the daemon exited after %d of %d distinct events", r.distinctCount(), n)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d distinct events arrived within %s", r.distinctCount(), n, timeout)
		}
	}
	return nil
}

// latencies returns the latencies of the events committed in [from, to).
func (r *isoReceiver) latencies(from, to time.Time) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Duration
	for i, c := range r.commit {
		if !c.Before(from) && c.Before(to) {
			out = append(out, r.lat[i])
		}
	}
	return out
}

// firstAfter is when the first request after t succeeded (zero if none).
func (r *isoReceiver) firstAfter(t time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.ok {
		if a.After(t) {
			return a
		}
	}
	return time.Time{}
}

// lineCounter counts the events the stdout sink writes into a FIFO.
type lineCounter struct {
	n      atomic.Int64
	mu     sync.Mutex
	target int64
	at     time.Time
	done   chan struct{}
	// last is when events last arrived; maxGap the longest wait for more
	// before the target was reached: the longest the sink was held up.
	last   time.Time
	maxGap time.Duration
}

func (c *lineCounter) count(f *os.File) {
	buf := make([]byte, 1<<20)
	// A mark may straddle two reads: each read is counted together with
	// the previous one's last len(mark)-1 bytes, too short to hold a mark
	// by themselves, so none is counted twice.
	var chunk []byte
	keep := len(eventMark) - 1
	for {
		k, err := f.Read(buf)
		if k > 0 {
			chunk = append(chunk, buf[:k]...)
			c.add(int64(bytes.Count(chunk, eventMark)))
			chunk = append(chunk[:0], chunk[max(len(chunk)-keep, 0):]...)
		}
		if err != nil {
			return
		}
	}
}

func (c *lineCounter) add(m int64) {
	total := c.n.Add(m)
	c.mu.Lock()
	if m > 0 && c.at.IsZero() {
		now := time.Now()
		if !c.last.IsZero() {
			c.maxGap = max(c.maxGap, now.Sub(c.last))
		}
		c.last = now
	}
	if c.done != nil && c.at.IsZero() && total >= c.target {
		c.at = time.Now()
		close(c.done)
	}
	c.mu.Unlock()
}

// wait returns when n events were written.
func (c *lineCounter) wait(n int64, exited <-chan struct{}, timeout time.Duration) (time.Time, error) {
	c.mu.Lock()
	c.target, c.done = n, make(chan struct{})
	done := c.done
	c.mu.Unlock()
	c.add(0)
	select {
	case <-done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.at, nil
	case <-exited:
		return time.Time{}, fmt.Errorf("the daemon exited after %d of %d events", c.n.Load(), n)
	case <-time.After(timeout):
		return time.Time{}, fmt.Errorf("%d of %d events written within %s", c.n.Load(), n, timeout)
	}
}

// writeTable prints the isolation figures.
func (r *Isolate) writeTable(w io.Writer) {
	fmt.Fprintf(w, "\nisolation: stdout sink draining %d changes alone %.2fs, next to a webhook taking %.0f ms per request %.2fs (%.2fx, medians of %d runs; the slow sink had %d events, detached: %v); longest wait for events alone %.0f ms, next to the slow sink %.0f ms (medians)\n",
		r.Changes, r.AloneSeconds, r.SlowDelayMs, r.WithSlowSeconds, r.Ratio, len(r.AloneRuns), r.SlowDelivered, r.SlowDetached,
		medianOf(r.AloneMaxGapMs), medianOf(r.WithSlowMaxGapMs))
	if o := r.Outage; o != nil {
		fmt.Fprintf(w, "isolation: webhook receiver down %.0fs at %d changes/s (%d events): other sink p50 %.1f ms, p99 %.1f ms, max %.1f ms (committed during the outage: p99 %.1f ms, max %.1f ms); "+
			"before it %.1f ms, while catching up %.1f ms, after the rejoin %.1f ms; "+
			"detached %.1fs after the receiver went down; after it came back: first delivery %.1fs (retry backoff), rejoined %.1fs; WAL retained at most %s (catch-up slot %s); "+
			"catch-up walsender %.2f s CPU over the %.1f s its slot existed, %.2f s over the %.1f s it streamed the backlog (pipeline's walsender %.2f s and %.2f s over the same times)\n",
			o.DownSeconds, o.Rate, o.Events, o.P50ms, o.P99ms, o.Maxms, o.OutageP99ms, o.OutageMaxms,
			o.BeforeP99ms, o.CatchupP99ms, o.RejoinedP99ms, o.DetachSeconds, o.FirstDeliverySeconds, o.RejoinSeconds, mib(o.MaxRetainedWAL), mib(o.MaxCatchupRetained),
			o.CatchupWalsenderCPU, o.CatchupSeconds, o.StreamingCatchupWalsenderCPU, o.StreamingSeconds, o.PipelineWalsenderCPU, o.StreamingPipelineWalsenderCPU)
	}
}

// loadAvg is the 1-minute load average ("" when unknown).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := bytes.Fields(b)
	if len(f) == 0 {
		return ""
	}
	return string(f[0])
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// splitIsolate takes the isolation path out of the drain paths.
func splitIsolate(paths []string) (drain []string, iso bool) {
	for _, p := range paths {
		if p == PathIsolate {
			iso = true
			continue
		}
		drain = append(drain, p)
	}
	return drain, iso
}
