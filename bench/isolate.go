package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
