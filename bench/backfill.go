package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// BackfillRun is what the backfill path measured in one run, besides the
// Drain figures (whose ChangesPerSec is backfilled rows per second).
type BackfillRun struct {
	Rows int64 `json:"rows"`
	// WALPerRow is the WAL written while the backfill ran, per row read:
	// the chunks' messages, the row locks' records and the progress rows
	// (the live writer's few hundred bytes per second included).
	WALPerRow float64 `json:"wal_bytes_per_row"`
	// LiveEvents are the live changes that reached the webhook sink
	// during the backfill, with their commit→sink latency.
	LiveEvents int     `json:"live_events"`
	LiveP50ms  float64 `json:"live_p50_ms"`
	LiveP99ms  float64 `json:"live_p99_ms"`
	LiveMaxms  float64 `json:"live_max_ms"`
	// LiveRate is the live writer's rate (Config.BackfillLiveRate; 0: the
	// backfill ran alone).
	LiveRate int `json:"live_rate"`
	// From walcast's "backfill done" log line: the chunks, how long a
	// chunk held its rows locked (its locking read to its commit) on
	// average and at most, and the runner's own rows/s (its start to the
	// last chunk's commit, without waiting for the sinks).
	Chunks           int64   `json:"chunks"`
	LockAvgMs        float64 `json:"lock_avg_ms"`
	LockMaxMs        float64 `json:"lock_max_ms"`
	RunnerRowsPerSec float64 `json:"runner_rows_per_sec"`
}

// drainBackfill backfills the bench table (what the workload left of it)
// to the sink "out" of a fresh pipeline (stdout, or kafka for
// backfill-kafka) while, for the backfill path, a writer commits
// BackfillLiveRate single-row inserts per second into bench_live, which a
// webhook sink receives: rows/s from the request until every sink has
// confirmed the backfill's last chunk, the live changes' commit→sink
// latency meanwhile, the WAL written per row, the time a chunk holds its
// rows locked, host and plugin RSS and CPU.
// The path's slot is not used: the pipeline makes its own, so that only
// the backfill and the live changes flow through it.
func (e *env) drainBackfill(ctx context.Context, poll *pgx.Conn, benchPath string, run int) (Drain, error) {
	v := backfillVariants[benchPath]
	if _, err := e.conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_live (id bigint PRIMARY KEY, v int)`); err != nil {
		return Drain{}, fmt.Errorf("create bench_live: %w", err)
	}
	rcv, err := startReceiver(true)
	if err != nil {
		return Drain{}, err
	}
	defer rcv.close()
	name := fmt.Sprintf("%s_%d", strings.ReplaceAll(benchPath, "-", "_"), run)
	slot := "b_fill_" + name // not the path's own slot (createSlots names that b_<path>_<run>)
	out, stopOut, err := e.backfillSink(ctx, v, name)
	if err != nil {
		return Drain{}, err
	}
	defer stopOut()
	path, err := e.writeBackfillPipeline(name, slot, rcv.url, out)
	if err != nil {
		return Drain{}, err
	}
	p, err := e.spawn(ctx, name, filepath.Join(e.cfg.BinDir, "walcast"), "run", "-log-level", "info", path)
	if err != nil {
		return Drain{}, err
	}
	defer func() {
		p.kill()
		// The pipeline's slot would keep WAL for the paths after it.
		e.dropSlot(context.Background(), slot)
	}()
	if err := e.waitSlotCreated(ctx, poll, p, slot); err != nil {
		return Drain{}, err
	}
	// The live writer runs from before the request until every sink has
	// the backfill.
	liveRate := e.cfg.BackfillLiveRate
	if !v.live {
		liveRate = 0
	}
	stopWriter, err := e.startLiveWriter(ctx, liveRate)
	if err != nil {
		return Drain{}, err
	}
	defer stopWriter()
	if liveRate > 0 {
		time.Sleep(time.Second) // the live stream is flowing before the backfill starts
	}
	m, err := e.backfillOnce(ctx, poll, p, path, slot, rcv)
	if err != nil {
		return Drain{}, err
	}
	if err := stopWriter(); err != nil {
		return Drain{}, err
	}
	d := e.backfillFigures(p, m, rcv, liveRate)
	if err := e.stopDaemon(p); err != nil {
		return d, err
	}
	// Read once the daemon is gone: its log is complete.
	return d, e.readBackfillDone(p.name, d.Backfill)
}

// writeBackfillPipeline writes the backfill path's pipeline: the bench
// table backfilled to a stdout sink, bench_live's changes to a webhook
// sink posting to url.
func (e *env) writeBackfillPipeline(name, slot, url, out string) (string, error) {
	pipeline := fmt.Sprintf(`pipeline = %q

source "postgres" {
  dsn         = %q
  tables      = ["public.bench", "public.bench_live"]
  slot        = %q
  publication = "bench_fill_pub"
}

%s

sink "webhook" "live" {
  delivery {
    batch_size = 100
  }
  config {
    url = %q
  }
}
`, name, e.dsn, slot, out, url)
	path := filepath.Join(e.work, name+".hcl")
	return path, os.WriteFile(path, []byte(pipeline), 0o644)
}

// waitSlotCreated waits until the slot walcast creates as it starts is
// streaming.
func (e *env) waitSlotCreated(ctx context.Context, poll *pgx.Conn, p *process, slot string) error {
	for deadline := time.Now().Add(time.Minute); ; {
		var active bool
		err := poll.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("poll slot %s: %w", slot, err)
		}
		if active {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("walcast exited before streaming\n%s", e.tailLog(p.name))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("walcast did not stream within a minute\n%s", e.tailLog(p.name))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startLiveWriter commits rate single-row transactions a second into
// bench_live, on a connection of its own, until stop, which reports the
// writer's error and may be called again. A rate of 0 writes nothing.
func (e *env) startLiveWriter(ctx context.Context, rate int) (stop func() error, err error) {
	if rate <= 0 {
		return func() error { return nil }, nil
	}
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return nil, err
	}
	stopLive := make(chan struct{})
	liveErr := make(chan error, 1)
	go func() {
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := int64(1); ; i++ {
			select {
			case <-stopLive:
				liveErr <- nil
				return
			case <-tick.C:
			}
			if _, err := conn.Exec(ctx, `INSERT INTO bench_live VALUES ($1, 0) ON CONFLICT (id) DO UPDATE SET v = bench_live.v + 1`, i); err != nil {
				liveErr <- fmt.Errorf("live writer: %w", err)
				return
			}
		}
	}()
	return sync.OnceValue(func() error {
		close(stopLive)
		err := <-liveErr
		conn.Close(context.Background())
		return err
	}), nil
}

// backfillRun is what one backfill request took: from the request (t0) to
// every sink confirming its last chunk (t1), the rows backfilled and the
// WAL written meanwhile.
type backfillRun struct {
	t0, t1            time.Time
	rows              int64
	walStart, walDone uint64
}

// backfillOnce requests the backfill of the bench table to sink "out" and
// waits until the slot is confirmed past its last chunk. The receiver's
// latencies start afresh with the request.
func (e *env) backfillOnce(ctx context.Context, poll *pgx.Conn, p *process, path, slot string, rcv *receiver) (backfillRun, error) {
	var m backfillRun
	if err := poll.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn`).Scan(&m.walStart); err != nil {
		return m, err
	}
	rcv.mu.Lock()
	rcv.lat, rcv.commit = rcv.lat[:0], rcv.commit[:0]
	rcv.mu.Unlock()
	m.t0 = time.Now()
	if out, err := exec.CommandContext(ctx, filepath.Join(e.cfg.BinDir, "walcast"), "backfill", path, "--table", "public.bench", "--sink", "out").CombinedOutput(); err != nil {
		return m, fmt.Errorf("walcast backfill: %w: %s", err, out)
	}
	var err error
	if m.rows, err = e.waitBackfillDone(ctx, poll, p); err != nil {
		return m, err
	}
	if err := poll.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn`).Scan(&m.walDone); err != nil {
		return m, err
	}
	// Every sink has the last chunk once the slot is confirmed past it.
	if m.t1, err = e.waitConfirmed(ctx, poll, slot, m.walDone, p.exited, drainTimeout); err != nil {
		return m, fmt.Errorf("walcast: %w\n%s", err, e.tailLog(p.name))
	}
	return m, nil
}

// waitBackfillDone waits until the pipeline's last backfill is done and
// returns its rows.
func (e *env) waitBackfillDone(ctx context.Context, poll *pgx.Conn, p *process) (int64, error) {
	var rows int64
	for deadline := time.Now().Add(drainTimeout); ; {
		var state string
		err := poll.QueryRow(ctx, `SELECT state, rows_done FROM walcast.backfills WHERE pipeline = $1 ORDER BY id DESC LIMIT 1`, p.name).Scan(&state, &rows)
		if err != nil {
			return rows, fmt.Errorf("poll backfill: %w", err)
		}
		if state == "done" {
			return rows, nil
		}
		if state != "queued" && state != "running" {
			return rows, fmt.Errorf("backfill ended %s\n%s", state, e.tailLog(p.name))
		}
		select {
		case <-p.exited:
			return rows, fmt.Errorf("walcast exited during the backfill\n%s", e.tailLog(p.name))
		default:
		}
		if time.Now().After(deadline) {
			return rows, errors.New("backfill did not finish in time")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// backfillFigures is the Drain of one backfill: m's rows and seconds, the
// daemon's and its plugins' usage, and the live changes' latencies.
func (e *env) backfillFigures(p *process, m backfillRun, rcv *receiver, liveRate int) Drain {
	rcv.mu.Lock()
	lat := slices.Clone(rcv.lat)
	rcv.mu.Unlock()
	slices.Sort(lat)
	host, _ := readProc(p.pid())
	plugin := childrenUsage(p.pid())
	secs := m.t1.Sub(m.t0).Seconds()
	fill := &BackfillRun{Rows: m.rows, WALPerRow: float64(m.walDone-m.walStart) / float64(max(m.rows, 1)), LiveEvents: len(lat),
		LiveRate: liveRate}
	if n := len(lat); n > 0 {
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		fill.LiveP50ms, fill.LiveP99ms, fill.LiveMaxms = ms(lat[n/2]), ms(lat[n*99/100]), ms(lat[n-1])
	}
	e.logf("  backfill: %d rows, %.0f bytes of WAL per row; %d live changes meanwhile, p50 %.0f ms p99 %.0f ms max %.0f ms",
		m.rows, fill.WALPerRow, fill.LiveEvents, fill.LiveP50ms, fill.LiveP99ms, fill.LiveMaxms)
	return Drain{
		Seconds:       secs,
		ChangesPerSec: float64(m.rows) / secs,
		HostRSSMiB:    float64(host.HWMKiB) / 1024,
		PluginRSSMiB:  float64(plugin.HWMKiB) / 1024,
		HostCPU:       host.CPU,
		PluginCPU:     plugin.CPU,
		Backfill:      fill,
	}
}

// backfillDone is the runner's log line at the end of a backfill.
var backfillDone = regexp.MustCompile(`msg="backfill done".* rows=(\d+) chunks=(\d+) rows_per_s=(\d+) lock_avg=(\S+) lock_max=(\S+)`)

// readBackfillDone fills in fill's figures from the last "backfill done"
// line of the daemon's log.
func (e *env) readBackfillDone(name string, fill *BackfillRun) error {
	log, err := os.ReadFile(filepath.Join(e.work, name+".log"))
	if err != nil {
		return err
	}
	all := backfillDone.FindAllStringSubmatch(string(log), -1)
	if len(all) == 0 {
		return fmt.Errorf("no \"backfill done\" line in walcast's log\n%s", e.tailLog(name))
	}
	m := all[len(all)-1]
	fill.Chunks, _ = strconv.ParseInt(m[2], 10, 64)
	fill.RunnerRowsPerSec, _ = strconv.ParseFloat(m[3], 64)
	avg, err1 := time.ParseDuration(m[4])
	most, err2 := time.ParseDuration(m[5])
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("walcast's \"backfill done\" line: %w", err)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	fill.LockAvgMs, fill.LockMaxMs = ms(avg), ms(most)
	e.logf("  backfill: %d chunks, rows locked %.1f ms per chunk on average, %.1f ms at most; the runner read %.0f rows/s",
		fill.Chunks, fill.LockAvgMs, fill.LockMaxMs, fill.RunnerRowsPerSec)
	return nil
}

// The backfill paths: the bench table backfilled to stdout next to the
// live writer (BackfillLiveRate), to stdout alone, and to the kafka sink
// with eos = true (into walcast-kfake) alone — issue 33's goal 4.
const (
	PathBackfillQuiet = "backfill-quiet"
	PathBackfillKafka = "backfill-kafka"
)

// backfillVariant is what a backfill path backfills into.
type backfillVariant struct {
	kafka bool // the kafka sink (eos) instead of stdout
	live  bool // the live writer runs
}

var backfillVariants = map[string]backfillVariant{
	PathBackfill:      {live: true},
	PathBackfillQuiet: {},
	PathBackfillKafka: {kafka: true},
}

// backfillSink is the block of the sink "out" the backfill goes to, and
// what stops what it writes to.
func (e *env) backfillSink(ctx context.Context, v backfillVariant, name string) (string, func(), error) {
	if !v.kafka {
		return `sink "stdout" "out" {
  delivery {
    batch_size = 1000
  }
  config {
    path = "/dev/null"
  }
}`, func() {}, nil
	}
	addr, stop, err := e.startKfake(ctx)
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf(`sink "kafka" "out" {
  config {
    brokers          = [%q]
    eos              = true
    transactional_id = "bench-%s"
  }
}`, addr, name), stop, nil
}
