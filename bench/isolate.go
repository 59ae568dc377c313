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
// pipeline keep their pace (docs/slow-sinks.md).
//
//   - Drain: IsolateConfig.Changes changes wait in a slot; the daemon
//     drains them with a stdout sink alone, then with the stdout sink next
//     to a webhook whose receiver takes SlowDelay per request, then next
//     to a webhook whose receiver answers nothing until the stdout sink is
//     done (stalled). The figure is the stdout sink's drain time (t0: the
//     walsender is active; t1: the sink wrote the last change), next to
//     the slow or stalled one over alone, with the peak memory of the
//     daemon and its plugins. Then the stalled receiver answers: how fast
//     that sink catches up, and when it rejoins the live stream.
//   - Outage (outage.go): Rate changes/s through two webhook sinks; after
//     Warmup the second one's receiver refuses connections for Down, then
//     comes back. Figures: the first sink's commit → arrival latency (all
//     of it, and of the changes committed during the outage), when the
//     down sink detached and when it rejoined, the most WAL the pipeline's
//     slots retained at once, and the CPU of the walsender streaming the
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
	// MaxCatchup bounds how long a sink may take to rejoin after its
	// receiver is back (the outage) or answers again (the stalled drain).
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
	// WithStalledSeconds: the same next to the stalled webhook;
	// StalledRatio = with stalled / alone.
	WithStalledSeconds float64   `json:"with_stalled_seconds"`
	StalledRatio       float64   `json:"stalled_ratio"`
	WithStalledRuns    []float64 `json:"with_stalled_runs"`
	// LoadAvg: the machine's load average after each drain (alone, next
	// to the slow sink, next to the stalled one).
	LoadAvg []string `json:"loadavg"`
	// The longest the stdout sink waited for its next events, per run:
	// alone, and next to the slow or stalled sink (where it includes
	// detach_after and the detachment). Less at the mercy of a busy
	// machine than the drain times.
	AloneMaxGapMs       []float64 `json:"alone_max_gap_ms"`
	WithSlowMaxGapMs    []float64 `json:"with_slow_max_gap_ms"`
	WithStalledMaxGapMs []float64 `json:"with_stalled_max_gap_ms"`
	SlowDelayMs         float64   `json:"slow_delay_ms"`
	// SlowDelivered: events the slow sink had received when the fast one
	// was done; SlowDetached: whether it was detached by then (last run).
	SlowDelivered int64 `json:"slow_delivered"`
	SlowDetached  bool  `json:"slow_detached"`
	// PeakRSS is the daemon's and its plugins' peak memory (VmHWM) once
	// the stdout sink was done, per drain (medians of the runs).
	PeakRSS IsolateRSS `json:"peak_rss"`
	// Catchup is the stalled sink catching up once its receiver answers,
	// per run.
	Catchup []Catchup `json:"stalled_catchup"`

	Outage *Outage `json:"outage"`

	rss [3][]RSS // per drain kind, per run: summarised into PeakRSS
}

// RSS is the peak resident memory (VmHWM) of the daemon (Host) and of its
// plugins together, in MiB.
type RSS struct {
	Host   float64 `json:"host_mib"`
	Plugin float64 `json:"plugin_mib"`
}

// IsolateRSS is the peak memory of each drain of the isolation figures.
type IsolateRSS struct {
	Alone       RSS `json:"alone"`
	WithSlow    RSS `json:"with_slow"`
	WithStalled RSS `json:"with_stalled"`
}

// Catchup is a stalled sink catching up once its receiver answers again.
type Catchup struct {
	// Changes it still lacked then; Seconds until it had them all.
	Changes       int     `json:"changes"`
	Seconds       float64 `json:"seconds"`
	ChangesPerSec float64 `json:"changes_per_sec"`
	// Detached: it had a catch-up slot when its receiver answered;
	// RejoinSeconds: from then until that slot was dropped (the sink
	// rejoined the live stream).
	Detached      bool    `json:"detached"`
	RejoinSeconds float64 `json:"rejoin_seconds"`
	// PeakRSS: the daemon's and its plugins' once it had rejoined.
	PeakRSS RSS `json:"peak_rss"`
}

// The drains of the isolation figures, in the order each run does them.
const (
	drainAlone = iota
	drainWithSlow
	drainWithStalled
)

var drainNames = [...]string{"alone", "pair", "stalled"}

// isolate runs both isolation measurements.
func (e *env) isolate(ctx context.Context) (*Isolate, error) {
	ic := e.cfg.Isolate
	res := &Isolate{Changes: ic.Changes, SlowDelayMs: float64(ic.SlowDelay.Milliseconds())}
	runs := max(e.cfg.Runs, 1)
	if err := e.isolateWorkload(ctx, runs); err != nil {
		return nil, err
	}
	slow := newIsoReceiver(ic.SlowDelay)
	if err := slow.up(""); err != nil {
		return nil, err
	}
	defer slow.down()
	// The drains of a run follow one another, so that a busy moment of
	// the machine weighs on each alike.
	for i := range runs {
		if err := e.isolateRun(ctx, i, runs, slow, res); err != nil {
			return nil, err
		}
	}
	res.summarize()
	var err error
	if res.Outage, err = e.outage(ctx); err != nil {
		return res, fmt.Errorf("outage: %w", err)
	}
	return res, nil
}

// isolateWorkload creates every drain's slot, then inserts the Changes
// they all drain: each slot holds all of them.
func (e *env) isolateWorkload(ctx context.Context, runs int) error {
	ic := e.cfg.Isolate
	for i := range runs {
		for _, s := range drainNames {
			if err := e.createSlot(ctx, fmt.Sprintf("b_iso_%s_%d", s, i)); err != nil {
				return err
			}
		}
	}
	base := int64(e.cfg.Inserts + 100_000_000)
	e.logf("isolate: %d inserts in %d-row transactions", ic.Changes, e.cfg.TxSize)
	for lo := int64(0); lo < int64(ic.Changes); lo += int64(e.cfg.TxSize) {
		hi := min(lo+int64(e.cfg.TxSize), int64(ic.Changes)) - 1
		if _, err := e.conn.Exec(ctx, insertSQL, base+lo, base+hi); err != nil {
			return fmt.Errorf("isolate workload: %w", err)
		}
	}
	return nil
}

// isolateRun is run i of the drains: the stdout sink alone, next to the
// slow webhook, next to a stalled one.
func (e *env) isolateRun(ctx context.Context, i, runs int, slow *isoReceiver, res *Isolate) error {
	ic := e.cfg.Isolate
	alone, err := e.isoDrain(ctx, i, drainAlone, nil)
	if err != nil {
		return fmt.Errorf("stdout alone: %w", err)
	}
	e.logf("  run %d/%d: stdout alone: %.2fs, longest wait %s (load %s), peak RSS %.0f + %.0f MiB",
		i+1, runs, alone.seconds, alone.maxGap.Round(time.Millisecond), alone.load, alone.rss.Host, alone.rss.Plugin)
	from := slow.events.Load()
	pair, err := e.isoDrain(ctx, i, drainWithSlow, slow)
	if err != nil {
		return fmt.Errorf("stdout next to a slow webhook: %w", err)
	}
	pair.slowGot -= from
	e.logf("  run %d/%d: stdout next to a %s-per-request webhook: %.2fs (%.2fx), longest wait %s (load %s); the slow sink had %d events, detached %v",
		i+1, runs, ic.SlowDelay, pair.seconds, pair.seconds/alone.seconds, pair.maxGap.Round(time.Millisecond), pair.load, pair.slowGot, pair.detached)
	stuck := newIsoReceiver(0)
	stuck.distinct = map[string]bool{}
	stuck.hold()
	if err := stuck.up(""); err != nil {
		return err
	}
	defer stuck.down()
	stalled, err := e.isoDrain(ctx, i, drainWithStalled, stuck)
	if err != nil {
		return fmt.Errorf("stdout next to a stalled webhook: %w", err)
	}
	c := stalled.catchup
	e.logf("  run %d/%d: stdout next to a stalled webhook: %.2fs (%.2fx), longest wait %s (load %s); then the stalled sink caught up %d changes in %.2fs (%.0f changes/s), rejoined after %.2fs, peak RSS %.0f + %.0f MiB",
		i+1, runs, stalled.seconds, stalled.seconds/alone.seconds, stalled.maxGap.Round(time.Millisecond), stalled.load,
		c.Changes, c.Seconds, c.ChangesPerSec, c.RejoinSeconds, c.PeakRSS.Host, c.PeakRSS.Plugin)
	for k, d := range [...]isoDrainResult{alone, pair, stalled} {
		res.rss[k] = append(res.rss[k], d.rss)
		res.LoadAvg = append(res.LoadAvg, d.load)
	}
	res.AloneMaxGapMs = append(res.AloneMaxGapMs, float64(alone.maxGap.Microseconds())/1000)
	res.WithSlowMaxGapMs = append(res.WithSlowMaxGapMs, float64(pair.maxGap.Microseconds())/1000)
	res.WithStalledMaxGapMs = append(res.WithStalledMaxGapMs, float64(stalled.maxGap.Microseconds())/1000)
	res.AloneRuns = append(res.AloneRuns, alone.seconds)
	res.WithSlowRuns = append(res.WithSlowRuns, pair.seconds)
	res.WithStalledRuns = append(res.WithStalledRuns, stalled.seconds)
	res.SlowDelivered, res.SlowDetached = pair.slowGot, pair.detached
	res.Catchup = append(res.Catchup, c)
	return nil
}

// summarize takes the medians of the runs.
func (r *Isolate) summarize() {
	r.AloneSeconds, r.WithSlowSeconds = medianOf(r.AloneRuns), medianOf(r.WithSlowRuns)
	r.WithStalledSeconds = medianOf(r.WithStalledRuns)
	r.Ratio = r.WithSlowSeconds / r.AloneSeconds
	r.StalledRatio = r.WithStalledSeconds / r.AloneSeconds
	med := func(rs []RSS) RSS {
		var host, plugin []float64
		for _, x := range rs {
			host, plugin = append(host, x.Host), append(plugin, x.Plugin)
		}
		return RSS{Host: medianOf(host), Plugin: medianOf(plugin)}
	}
	r.PeakRSS = IsolateRSS{Alone: med(r.rss[drainAlone]), WithSlow: med(r.rss[drainWithSlow]), WithStalled: med(r.rss[drainWithStalled])}
}

type isoDrainResult struct {
	maxGap   time.Duration
	load     string
	seconds  float64
	rss      RSS
	slowGot  int64
	detached bool
	catchup  Catchup // drainWithStalled
}

// isoDrain drains the slot of drain kind of run i with a stdout sink
// writing into a FIFO the bench counts, next to a webhook sink posting to
// other when it is set. The stalled drain's other holds every request
// until the stdout sink is done; then it answers, and the drain measures
// that sink's catch-up.
func (e *env) isoDrain(ctx context.Context, run, kind int, other *isoReceiver) (isoDrainResult, error) {
	var r isoDrainResult
	name := fmt.Sprintf("iso_%s_%d", drainNames[kind], run)
	slot := "b_" + name
	fifo := filepath.Join(e.work, name+".fifo")
	lines, closeFIFO, err := countFIFO(fifo)
	if err != nil {
		return r, err
	}
	defer closeFIFO()
	poll, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return r, err
	}
	defer poll.Close(context.Background())
	p, err := e.startDaemon(ctx, daemonRun{name: name, slot: slot, sink: isoSinks(fifo, other, kind)})
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
	r.maxGap = lines.longestWait()
	r.rss = peakRSS(p)
	if other != nil {
		r.slowGot = other.events.Load()
		n, err := e.catchupSlots(ctx, poll, name)
		if err != nil {
			return r, err
		}
		r.detached = n > 0
	}
	if kind == drainWithStalled {
		if r.catchup, err = e.catchUp(ctx, poll, p, other, r.detached); err != nil {
			return r, err
		}
	}
	if err := e.stopDaemon(p); err != nil {
		return r, err
	}
	return r, e.teardown(ctx, name)
}

// isoSinks is the sink blocks of an isolation drain: the stdout sink
// writing into fifo, and a webhook sink posting to other when it is set.
// The stalled sink's deliveries never time out while its receiver holds
// them: its catch-up then starts the moment the receiver answers, not
// after a retry backoff.
func isoSinks(fifo string, other *isoReceiver, kind int) string {
	sinks := fmt.Sprintf(`sink "stdout" "fast" {
  config {
    path = %q
  }
}
`, fifo)
	switch {
	case kind == drainWithStalled:
		sinks += fmt.Sprintf(`
sink "webhook" "slow" {
  delivery {
    deliver_timeout = "30m"
  }
  config {
    url     = %q
    timeout = "30m"
  }
}
`, other.url)
	case other != nil:
		sinks += fmt.Sprintf(`
sink "webhook" "slow" {
  config {
    url     = %q
    timeout = "30s"
  }
}
`, other.url)
	}
	return sinks
}

// countFIFO makes a FIFO at path and counts the events written into it
// until close.
func countFIFO(path string) (*lineCounter, func(), error) {
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		return nil, nil, fmt.Errorf("mkfifo: %w", err)
	}
	// Read-write, so that opening it blocks neither side and the reader
	// never sees EOF while the plugin (re)opens it.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, nil, err
	}
	lines := new(lineCounter)
	go lines.count(f)
	return lines, func() { f.Close() }, nil
}

// peakRSS is the peak memory of the daemon p and of its plugins.
func peakRSS(p *process) RSS {
	host, _ := readProc(p.pid())
	return RSS{Host: float64(host.HWMKiB) / 1024, Plugin: float64(childrenUsage(p.pid()).HWMKiB) / 1024}
}

// catchUp lets the stalled receiver answer and measures the sink's
// catch-up: how fast the changes it lacked arrive, and when its catch-up
// slot is dropped (it rejoined the live stream).
func (e *env) catchUp(ctx context.Context, poll *pgx.Conn, p *process, rcv *isoReceiver, detached bool) (Catchup, error) {
	ic := e.cfg.Isolate
	c := Catchup{Detached: detached, Changes: ic.Changes - rcv.distinctCount()}
	at := time.Now()
	rcv.release()
	if err := rcv.waitDistinct(ic.Changes, p.exited, ic.MaxCatchup); err != nil {
		return c, fmt.Errorf("stalled sink: %w\n%s", err, e.tailLog(p.name))
	}
	c.Seconds = time.Since(at).Seconds()
	c.ChangesPerSec = float64(c.Changes) / c.Seconds
	for deadline := at.Add(ic.MaxCatchup); ; {
		n, err := e.catchupSlots(ctx, poll, p.name)
		if err != nil {
			return c, err
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			return c, fmt.Errorf("the stalled sink did not rejoin within %s of its receiver answering\n%s", ic.MaxCatchup, e.tailLog(p.name))
		}
		select {
		case <-p.exited:
			return c, fmt.Errorf("walcast exited before the stalled sink rejoined\n%s", e.tailLog(p.name))
		case <-time.After(50 * time.Millisecond):
		}
	}
	c.RejoinSeconds = time.Since(at).Seconds()
	c.PeakRSS = peakRSS(p)
	return c, nil
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
	if len(r.Catchup) > 0 {
		var rates, rejoins []float64
		for _, c := range r.Catchup {
			rates, rejoins = append(rates, c.ChangesPerSec), append(rejoins, c.RejoinSeconds)
		}
		last := r.Catchup[len(r.Catchup)-1]
		fmt.Fprintf(w, "isolation: next to a stalled webhook %.2fs (%.2fx), longest wait for events %.0f ms; once its receiver answered, the stalled sink caught up at %.0f changes/s and rejoined after %.1fs (medians); peak RSS host + plugins alone %.0f + %.0f MiB, next to the slow sink %.0f + %.0f MiB, next to the stalled one %.0f + %.0f MiB, after its catch-up %.0f + %.0f MiB (last run)\n",
			r.WithStalledSeconds, r.StalledRatio, medianOf(r.WithStalledMaxGapMs), medianOf(rates), medianOf(rejoins),
			r.PeakRSS.Alone.Host, r.PeakRSS.Alone.Plugin, r.PeakRSS.WithSlow.Host, r.PeakRSS.WithSlow.Plugin,
			r.PeakRSS.WithStalled.Host, r.PeakRSS.WithStalled.Plugin, last.PeakRSS.Host, last.PeakRSS.Plugin)
	}
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
