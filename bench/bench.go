package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/pgtest"
	"github.com/walcast/walcast/pluginkit"
)

// Path names, in the order they run and are reported.
const (
	PathRecvlogical = "pg_recvlogical"
	PathLibrary     = "library"
	PathStdout      = "daemon-stdout"
	PathWebhook100  = "daemon-webhook-100"
	PathWebhook1000 = "daemon-webhook-1000"
	PathKafka       = "daemon-kafka-eos"
	// The same paths with a format other than walcast's (docs/formats.md, "Cost").
	PathStdoutDebezium = "daemon-stdout-debezium"
	PathKafkaDebezium  = "daemon-kafka-eos-debezium"
	PathStdoutSequin   = "daemon-stdout-sequin"
	PathStdoutCE       = "daemon-stdout-cloudevents"
	PathS3JSONL        = "daemon-s3-jsonl"   // bench/s3.go
	PathS3Parquet      = "daemon-s3-parquet" // bench/s3.go
	PathNATS           = "daemon-nats"       // bench/destinations.go
	PathRedis          = "daemon-redis"      // bench/destinations.go
	PathBackfill       = "backfill"          // bench/backfill.go
	// PathIsolate is the isolation figures (isolate.go), not a drain.
	PathIsolate = "isolate"
)

// AllPaths lists every path.
var AllPaths = []string{PathRecvlogical, PathLibrary, PathLibraryRules, PathStdout, PathConduit, PathStdoutDebezium, PathStdoutSequin, PathStdoutCE, PathStdoutFilter, PathStdoutTransform, PathWebhook100, PathWebhook1000, PathWebhookRoute, PathWebhookRules, PathKafka, PathKafkaDebezium, PathPostgresMirror, PathNATS, PathRedis, PathS3JSONL, PathS3Parquet, PathBackfill, PathBackfillQuiet, PathBackfillKafka, PathIsolate}

// Config says what to run. Zero values take the sizes.
type Config struct {
	// BinDir holds walcast, walcast-sink-*, walcast-kfake and
	// walcast-bench (the library-mode consumer runs as its own process).
	BinDir string
	// Workload, in rows; TxSize rows per transaction.
	Inserts, Updates, Deletes, TxSize int
	// Runs is how many times each path drains a fresh slot.
	Runs int
	// Paths to run (default AllPaths).
	Paths []string
	// The latency curve (latency.go): every sink of LatencySinks at
	// every rate of LatencyRates (changes/s) for LatencyDuration each; a
	// zero duration skips it.
	LatencySinks    []string
	LatencyRates    []int
	LatencyDuration time.Duration
	// BigTx is the size of the one-transaction memory test; 0 skips it.
	BigTx int
	// WorkDir receives pipeline files and logs; default a temporary
	// directory that is removed afterwards.
	WorkDir string
	// ProfileDir, when set, runs the daemon paths in-process in
	// walcast-bench (same code as `walcast run`) writing CPU and
	// allocation profiles there, and has the library consumer profile too.
	ProfileDir string
	// Log receives progress lines (default discard).
	Log io.Writer
	// Isolate sizes the isolation figures (path PathIsolate).
	Isolate IsolateConfig
	// BackfillLiveRate is the live writer's rate while the backfill path
	// backfills, in single-row transactions per second; 0 runs the
	// backfill alone.
	BackfillLiveRate int
}

// Default is the benchmark.
func Default() Config {
	return Config{
		Inserts: 1_000_000, Updates: 200_000, Deletes: 100_000, TxSize: 100,
		Runs: 5, LatencySinks: []string{LatencyWebhook, LatencyKafka}, LatencyRates: []int{5_000, 20_000, 40_000, 80_000},
		LatencyDuration: 10 * time.Second, BigTx: 1_000_000,
		Isolate: DefaultIsolate(), BackfillLiveRate: 2000,
	}
}

// Scale multiplies the workload and the big transaction by f.
func (c Config) Scale(f float64) Config {
	sc := func(n int) int { return max(int(float64(n)*f), 0) }
	c.Inserts, c.Updates, c.Deletes, c.BigTx = sc(c.Inserts), sc(c.Updates), sc(c.Deletes), sc(c.BigTx)
	c.Isolate = c.Isolate.scale(f)
	return c
}

// Results is what a run measured; it is written as JSON.
type Results struct {
	Started  time.Time    `json:"started"`
	Machine  Machine      `json:"machine"`
	Workload Workload     `json:"workload"`
	Paths    []PathResult `json:"paths"`
	// Skipped are the paths that could not run here, with why (a peer
	// that is not installed).
	Skipped map[string]string `json:"skipped,omitempty"`
	Latency []Latency         `json:"latency,omitempty"`
	BigTx   *BigTx            `json:"big_tx,omitempty"`
	Isolate *Isolate          `json:"isolate,omitempty"`
}

// Machine describes where the figures come from.
type Machine struct {
	CPU        string `json:"cpu"`
	Cores      int    `json:"cores"`
	MemoryMiB  int64  `json:"memory_mib"`
	PostgreSQL string `json:"postgresql"`
	Go         string `json:"go"`
	Commit     string `json:"commit,omitempty"`
}

// Workload is what every slot held.
type Workload struct {
	Inserts      int     `json:"inserts"`
	Updates      int     `json:"updates"`
	Deletes      int     `json:"deletes"`
	TxSize       int     `json:"tx_size"`
	Changes      int     `json:"changes"`
	EndLSN       string  `json:"end_lsn"`
	WALBytes     int64   `json:"wal_bytes"`
	GenerateSecs float64 `json:"generate_seconds"`
}

// Drain is one drain of one slot.
type Drain struct {
	// Seconds runs from the harness starting the tool's process to the
	// drain's end (clock.go); ChangesPerSec is the workload over it.
	Seconds       float64 `json:"seconds"`
	ChangesPerSec float64 `json:"changes_per_sec"`
	// ActiveSeconds runs from the walsender becoming active to the same
	// end (the harness's clock before issue 33), StartupSeconds from the
	// process start to the walsender becoming active.
	ActiveSeconds  float64 `json:"seconds_from_walsender_active"`
	StartupSeconds float64 `json:"startup_seconds"`
	HostRSSMiB     float64 `json:"host_rss_mib"`
	PluginRSSMiB   float64 `json:"plugin_rss_mib"`
	HostCPU        float64 `json:"host_cpu_seconds"`
	PluginCPU      float64 `json:"plugin_cpu_seconds"`
	// CPUPerChange is host and plugin CPU per change, in µs: the figure
	// that moves least with the machine's load.
	CPUPerChange float64 `json:"cpu_us_per_change"`
	// SenderCPU is the CPU the slot's walsender (PostgreSQL decoding and
	// sending) used during the drain, and SenderShare that over the
	// drain's seconds: near 1 the walsender is the limit, below it the
	// client is.
	SenderCPU   float64 `json:"walsender_cpu_seconds"`
	SenderShare float64 `json:"walsender_cpu_share"`
	// EventsPerDeliver is the mean batch the daemon handed its sink (from
	// its metrics): small batches cost more CPU per change.
	EventsPerDeliver float64      `json:"events_per_deliver,omitempty"`
	Events           int64        `json:"events,omitempty"`   // as counted by the receiver, when it counts
	Backfill         *BackfillRun `json:"backfill,omitempty"` // the backfill path's own figures
	// ServerCPU is the CPU the destination server used (nats-server,
	// redis-server: started for the run; the postgres mirror's target
	// backends), ServerCPUPerChange that per
	// change in µs; not part of CPUPerChange.
	ServerCPU          float64 `json:"server_cpu_seconds,omitempty"`
	ServerCPUPerChange float64 `json:"server_cpu_us_per_change,omitempty"`
}

// PathResult is a path's runs, their medians and the fastest run.
type PathResult struct {
	Name   string  `json:"name"`
	Runs   []Drain `json:"runs"`
	Median Drain   `json:"median"`
	Best   Drain   `json:"best"`
	// Ratio is the median's changes/s over pg_recvlogical's median,
	// RatioBest the best run's over pg_recvlogical's best.
	Ratio     float64 `json:"ratio_to_pg_recvlogical"`
	RatioBest float64 `json:"best_ratio_to_pg_recvlogical"`
}

// BigTx is one large transaction drained by the daemon with the stdout sink.
type BigTx struct {
	Rows          int     `json:"rows"`
	Seconds       float64 `json:"seconds"`
	ChangesPerSec float64 `json:"changes_per_sec"`
	HostRSSMiB    float64 `json:"host_rss_mib"`
	PluginRSSMiB  float64 `json:"plugin_rss_mib"`
}

// env is the state shared by the steps of a run.
type env struct {
	cfg     Config
	log     io.Writer
	cluster *pgtest.Cluster
	dsn     string
	conn    *pgx.Conn // the harness's own: setup, workload, polling
	work    string
	endLSN  uint64
	// lastTxLSN is where the workload's last transaction starts.
	lastTxLSN uint64
	changes   int
	skipped   map[string]string
}

// Run runs the benchmark.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	cfg, iso, err := cfg.complete()
	if err != nil {
		return nil, err
	}
	e := &env{cfg: cfg, log: cfg.Log}
	res := &Results{Started: time.Now().UTC()}
	closeEnv, err := e.open(ctx)
	defer closeEnv()
	if err != nil {
		return nil, err
	}
	res.Machine = machine(ctx, e.conn)
	if err := e.setup(ctx); err != nil {
		return nil, err
	}
	slots, err := e.createSlots(ctx)
	if err != nil {
		return nil, err
	}
	if len(cfg.Paths) > 0 {
		if res.Workload, err = e.workload(ctx); err != nil {
			return nil, err
		}
	}
	runs, err := e.drainAll(ctx, slots)
	res.Skipped = e.skipped
	if err != nil {
		return res, err
	}
	res.Paths = pathResults(cfg.Paths, runs)
	return res, e.measureOthers(ctx, res, iso)
}

// complete fills in the defaults and checks the paths. iso reports
// whether the isolation figures were asked for: they are not a drain, so
// they leave Paths.
func (cfg Config) complete() (_ Config, iso bool, _ error) {
	def := Default()
	if cfg.TxSize <= 0 {
		cfg.TxSize = def.TxSize
	}
	if cfg.Runs <= 0 {
		cfg.Runs = 1
	}
	if len(cfg.Paths) == 0 {
		cfg.Paths = AllPaths
	}
	for _, p := range cfg.Paths {
		if !slices.Contains(AllPaths, p) {
			return cfg, false, fmt.Errorf("unknown path %q (known: %s)", p, strings.Join(AllPaths, ", "))
		}
	}
	cfg.Paths, iso = splitIsolate(cfg.Paths)
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	bin, err := filepath.Abs(cfg.BinDir)
	if err != nil {
		return cfg, false, err
	}
	cfg.BinDir = bin
	return cfg, iso, nil
}

// open makes the work directory (a temporary one unless WorkDir is set),
// starts the private cluster and connects the harness to it. The returned
// function undoes what open did, also when it failed half-way.
func (e *env) open(ctx context.Context) (func(), error) {
	var undo []func()
	closeAll := func() {
		for _, f := range slices.Backward(undo) {
			f()
		}
	}
	if e.cfg.WorkDir == "" {
		dir, err := os.MkdirTemp("", "walcast-bench-")
		if err != nil {
			return closeAll, err
		}
		undo = append(undo, func() { os.RemoveAll(dir) })
		e.work = dir
	} else {
		e.work = e.cfg.WorkDir
		if err := os.MkdirAll(e.work, 0o755); err != nil {
			return closeAll, err
		}
	}
	e.logf("starting PostgreSQL")
	c, err := pgtest.Start(ctx, pgtest.Options{Settings: []string{
		"max_wal_size = '8GB'",
		"checkpoint_timeout = '30min'",
		"wal_sender_timeout = '60s'",
		"shared_buffers = '256MB'",
		"logical_decoding_work_mem = '64MB'",
		"autovacuum = off",
	}})
	if err != nil {
		return closeAll, err
	}
	undo = append(undo, func() { c.Close() })
	e.cluster = c
	e.dsn = c.DSN("postgres")
	if e.conn, err = pgx.Connect(ctx, e.dsn); err != nil {
		return closeAll, err
	}
	undo = append(undo, func() { e.conn.Close(context.Background()) })
	return closeAll, nil
}

// createSlots creates one fresh slot per path and run, all before the
// workload, so that each holds all of it.
func (e *env) createSlots(ctx context.Context) (map[string][]string, error) {
	slots := map[string][]string{}
	for _, p := range e.cfg.Paths {
		for i := range e.cfg.Runs {
			name := fmt.Sprintf("b_%s_%d", strings.NewReplacer("-", "_", "pg_", "").Replace(p), i)
			if err := e.createSlot(ctx, name); err != nil {
				return nil, err
			}
			slots[p] = append(slots[p], name)
		}
	}
	return slots, nil
}

// drainAll drains each path's slots, dropping each once drained. Runs
// interleave (every path once, then again) so that whatever drifts during
// a run — page cache, WAL recycling — is shared fairly.
func (e *env) drainAll(ctx context.Context, slots map[string][]string) (map[string][]Drain, error) {
	runs := make(map[string][]Drain)
	for i := range e.cfg.Runs {
		for _, p := range e.cfg.Paths {
			slot := slots[p][i]
			e.logf("%s run %d/%d", p, i+1, e.cfg.Runs)
			if _, ok := e.skipped[p]; ok {
				if err := e.dropSlot(ctx, slot); err != nil {
					return runs, err
				}
				continue
			}
			r, err := e.drain(ctx, p, slot, i)
			if errors.Is(err, errSkipped) {
				e.logf("  %s: %v", p, err)
				if e.skipped == nil {
					e.skipped = map[string]string{}
				}
				e.skipped[p] = err.Error()
				if err := e.dropSlot(ctx, slot); err != nil {
					return runs, err
				}
				continue
			}
			if err != nil {
				return runs, fmt.Errorf("%s run %d: %w", p, i+1, err)
			}
			e.logf("  %.0f changes/s in %.2fs, host %.0f MiB %.1fs CPU, plugin %.0f MiB %.1fs CPU (%.2f µs/change), walsender %.0f%% of a core, %.0f events/Deliver",
				r.ChangesPerSec, r.Seconds, r.HostRSSMiB, r.HostCPU, r.PluginRSSMiB, r.PluginCPU, r.CPUPerChange, 100*r.SenderShare, r.EventsPerDeliver)
			runs[p] = append(runs[p], r)
			if err := e.dropSlot(ctx, slot); err != nil {
				return runs, err
			}
		}
	}
	return runs, nil
}

// pathResults is each path's runs, their median, and its ratio to
// pg_recvlogical's median when that ran.
func pathResults(paths []string, runs map[string][]Drain) []PathResult {
	var out []PathResult
	var base, baseBest float64
	for _, p := range paths {
		if len(runs[p]) == 0 {
			continue // skipped
		}
		pr := PathResult{Name: p, Runs: runs[p], Median: median(runs[p]), Best: best(runs[p])}
		if p == PathRecvlogical {
			base, baseBest = pr.Median.ChangesPerSec, pr.Best.ChangesPerSec
		}
		out = append(out, pr)
	}
	if base > 0 {
		for i := range out {
			out[i].Ratio = out[i].Median.ChangesPerSec / base
			out[i].RatioBest = out[i].Best.ChangesPerSec / baseBest
		}
	}
	return out
}

// best is the fastest of runs, all its figures from that one run.
func best(runs []Drain) Drain {
	var b Drain
	for _, r := range runs {
		if r.ChangesPerSec > b.ChangesPerSec {
			b = r
		}
	}
	return b
}

// measureOthers runs what is not a drain of the workload: the latency at
// a steady rate, the big transaction and (iso) the isolation figures.
func (e *env) measureOthers(ctx context.Context, res *Results, iso bool) error {
	cfg := e.cfg
	var err error
	if cfg.LatencyDuration > 0 && len(cfg.LatencyRates) > 0 {
		if res.Latency, err = e.latencyCurve(ctx); err != nil {
			return fmt.Errorf("latency: %w", err)
		}
	}
	if cfg.BigTx > 0 {
		e.logf("one transaction of %d rows", cfg.BigTx)
		if res.BigTx, err = e.bigTx(ctx); err != nil {
			return fmt.Errorf("big transaction: %w", err)
		}
	}
	if iso {
		e.logf("isolation: a slow sink next to a fast one, a sink down during a steady load")
		if res.Isolate, err = e.isolate(ctx); err != nil {
			return fmt.Errorf("isolation: %w", err)
		}
	}
	return nil
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.log, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

const publication = "bench_pub"

func (e *env) setup(ctx context.Context) error {
	_, err := e.conn.Exec(ctx, `
CREATE TABLE bench (id bigint PRIMARY KEY, account int, name text, amount numeric(12,2), payload text, updated_at timestamptz);
CREATE PUBLICATION `+publication+` FOR TABLE bench;`)
	if err != nil {
		return fmt.Errorf("create bench table: %w", err)
	}
	return nil
}

func (e *env) createSlot(ctx context.Context, name string) error {
	if _, err := e.conn.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, name); err != nil {
		return fmt.Errorf("create slot %s: %w", name, err)
	}
	return nil
}

func (e *env) dropSlot(ctx context.Context, name string) error {
	// The walsender may take a moment to let go after its client exits.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := e.conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, name)
		if err == nil || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("drop slot %s: %w", name, err)
			}
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// insertSQL makes rows of about 120 bytes.
const insertSQL = `INSERT INTO bench SELECT g, (g % 1000)::int, 'customer-' || g, (g % 100000) / 100.0,
  md5(g::text) || md5((g + 1)::text), now() FROM generate_series($1::bigint, $2::bigint) g`

func (e *env) workload(ctx context.Context) (Workload, error) {
	cfg := e.cfg
	wl := Workload{Inserts: cfg.Inserts, Updates: min(cfg.Updates, cfg.Inserts), Deletes: min(cfg.Deletes, cfg.Inserts), TxSize: cfg.TxSize}
	var start uint64
	if err := e.conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn`).Scan(&start); err != nil {
		return wl, err
	}
	e.logf("workload: %d inserts, %d updates, %d deletes in %d-row transactions", wl.Inserts, wl.Updates, wl.Deletes, wl.TxSize)
	t0 := time.Now()
	steps := []struct {
		sql string
		n   int
	}{
		{insertSQL, wl.Inserts},
		{`UPDATE bench SET amount = amount + 1, updated_at = now() WHERE id BETWEEN $1 AND $2`, wl.Updates},
		{`DELETE FROM bench WHERE id BETWEEN $1 AND $2`, wl.Deletes},
	}
	for _, s := range steps {
		for lo := 1; lo <= s.n; lo += cfg.TxSize {
			hi := min(lo+cfg.TxSize-1, s.n)
			if err := e.conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn`).Scan(&e.lastTxLSN); err != nil {
				return wl, err
			}
			if _, err := e.conn.Exec(ctx, s.sql, lo, hi); err != nil {
				return wl, fmt.Errorf("workload: %w", err)
			}
		}
	}
	if err := e.conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn`).Scan(&e.endLSN); err != nil {
		return wl, err
	}
	wl.GenerateSecs = time.Since(t0).Seconds()
	wl.Changes = wl.Inserts + wl.Updates + wl.Deletes
	wl.EndLSN = pluginkit.FormatLSN(e.endLSN)
	wl.WALBytes = int64(e.endLSN - start)
	e.changes = wl.Changes
	e.logf("workload: %d changes, %d MiB of WAL in %.1fs", wl.Changes, wl.WALBytes>>20, wl.GenerateSecs)
	return wl, nil
}

// waitActive polls until a walsender is active on slot and returns when
// it was first seen.
func (e *env) waitActive(ctx context.Context, conn *pgx.Conn, slot string, exited <-chan struct{}) (time.Time, error) {
	t, _, err := e.waitSender(ctx, conn, slot, exited)
	return t, err
}

// waitSender polls until a walsender is active on slot and returns when
// it was first seen and its process id.
func (e *env) waitSender(ctx context.Context, conn *pgx.Conn, slot string, exited <-chan struct{}) (time.Time, int, error) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		var pid *int32
		if err := conn.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&pid); err != nil {
			return time.Time{}, 0, fmt.Errorf("poll slot %s: %w", slot, err)
		}
		if pid != nil {
			return time.Now(), int(*pid), nil
		}
		select {
		case <-exited:
			return time.Time{}, 0, errors.New("the process exited before streaming")
		case <-ctx.Done():
			return time.Time{}, 0, ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			return time.Time{}, 0, errors.New("nothing streamed from the slot within 60s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// errExited is waitConfirmed's error when the process exited first.
var errExited = errors.New("the process exited before the slot was drained")

// waitConfirmed polls until slot's confirmed_flush_lsn reaches lsn.
func (e *env) waitConfirmed(ctx context.Context, conn *pgx.Conn, slot string, lsn uint64, exited <-chan struct{}, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		confirmed, err := slotConfirmed(ctx, conn, slot)
		if err != nil {
			return time.Time{}, err
		}
		if confirmed >= lsn {
			return time.Now(), nil
		}
		select {
		case <-exited:
			return time.Time{}, errExited
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("slot %s not drained within %s (confirmed %s, want %s)", slot, timeout, lsnText(confirmed), lsnText(lsn))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func median(runs []Drain) Drain {
	pick := func(f func(Drain) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return Drain{
		Seconds:            pick(func(r Drain) float64 { return r.Seconds }),
		ChangesPerSec:      pick(func(r Drain) float64 { return r.ChangesPerSec }),
		ActiveSeconds:      pick(func(r Drain) float64 { return r.ActiveSeconds }),
		StartupSeconds:     pick(func(r Drain) float64 { return r.StartupSeconds }),
		HostRSSMiB:         pick(func(r Drain) float64 { return r.HostRSSMiB }),
		PluginRSSMiB:       pick(func(r Drain) float64 { return r.PluginRSSMiB }),
		HostCPU:            pick(func(r Drain) float64 { return r.HostCPU }),
		PluginCPU:          pick(func(r Drain) float64 { return r.PluginCPU }),
		CPUPerChange:       pick(func(r Drain) float64 { return r.CPUPerChange }),
		SenderCPU:          pick(func(r Drain) float64 { return r.SenderCPU }),
		SenderShare:        pick(func(r Drain) float64 { return r.SenderShare }),
		EventsPerDeliver:   pick(func(r Drain) float64 { return r.EventsPerDeliver }),
		ServerCPU:          pick(func(r Drain) float64 { return r.ServerCPU }),
		ServerCPUPerChange: pick(func(r Drain) float64 { return r.ServerCPUPerChange }),
	}
}

func machine(ctx context.Context, conn *pgx.Conn) Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				m.CPU = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kib int64
		fmt.Sscanf(strings.SplitN(string(b), "\n", 2)[0], "MemTotal: %d kB", &kib)
		m.MemoryMiB = kib >> 10
	}
	conn.QueryRow(ctx, `SHOW server_version`).Scan(&m.PostgreSQL)
	return m
}

// WriteJSON writes r to path, creating its directory.
func (r *Results) WriteJSON(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WriteTable prints the figures as Markdown tables.
func (r *Results) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "workload: %d changes (%d inserts, %d updates, %d deletes, %d-row transactions), %d MiB of WAL\n\n",
		r.Workload.Changes, r.Workload.Inserts, r.Workload.Updates, r.Workload.Deletes, r.Workload.TxSize, r.Workload.WALBytes>>20)
	fmt.Fprintln(w, "| path | changes/s | ratio | host RSS MiB | plugin RSS MiB | host CPU s | plugin CPU s | µs/change | walsender CPU | events/Deliver |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, p := range r.Paths {
		m := p.Median
		fmt.Fprintf(w, "| %s | %.0f | %.2f | %.0f | %s | %.1f | %s | %.2f | %.0f%% | %s |\n", p.Name, m.ChangesPerSec, p.Ratio, m.HostRSSMiB,
			dash(m.PluginRSSMiB, "%.0f"), m.HostCPU, dash(m.PluginCPU, "%.1f"), m.CPUPerChange, 100*m.SenderShare,
			dash(m.EventsPerDeliver, "%.0f"))
	}
	r.writeRatioTable(w)
	r.writeCostTable(w)
	r.writeRuleTable(w)
	for _, p := range r.Paths {
		if m := p.Median; m.ServerCPU > 0 {
			fmt.Fprintf(w, "\n%s: the destination server used %.1f s of CPU, %.2f µs/change (not in the table's µs/change)\n", p.Name, m.ServerCPU, m.ServerCPUPerChange)
		}
	}
	writeLatencyTable(w, r.Latency)
	if b := r.BigTx; b != nil {
		fmt.Fprintf(w, "\none %d-row transaction through the daemon (stdout sink): host peak RSS %.0f MiB, plugin %.0f MiB, %.0f changes/s\n",
			b.Rows, b.HostRSSMiB, b.PluginRSSMiB, b.ChangesPerSec)
	}
	for _, p := range r.Paths {
		for i, run := range p.Runs {
			if b := run.Backfill; b != nil {
				fmt.Fprintf(w, "\n%s run %d: %d rows, %.0f rows/s (runner %.0f), %.0f bytes of WAL per row, %d chunks holding their rows locked %.1f ms on average, %.1f ms at most; %d live changes at %d/s meanwhile, p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
					p.Name, i+1, b.Rows, run.ChangesPerSec, b.RunnerRowsPerSec, b.WALPerRow, b.Chunks, b.LockAvgMs, b.LockMaxMs, b.LiveEvents, b.LiveRate, b.LiveP50ms, b.LiveP99ms, b.LiveMaxms)
			}
		}
	}
	if r.Isolate != nil {
		r.Isolate.writeTable(w)
	}
}

func dash(v float64, format string) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf(format, v)
}
