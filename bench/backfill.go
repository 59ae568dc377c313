package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
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
}

// backfillLiveRate is the live writer's rate during a backfill, in
// single-row transactions per second.
const backfillLiveRate = 500

// drainBackfill backfills the bench table (what the workload left of it)
// to the stdout sink of a fresh pipeline while a writer commits
// backfillLiveRate single-row inserts per second into bench_live, which a
// webhook sink receives: rows/s from the request until every sink has
// confirmed the backfill's last chunk, the live changes' commit→sink
// latency meanwhile, the WAL written per row, host and plugin RSS and CPU.
// The path's slot is not used: the pipeline makes its own, so that only
// the backfill and the live changes flow through it.
func (e *env) drainBackfill(ctx context.Context, poll *pgx.Conn, run int) (Drain, error) {
	if _, err := e.conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_live (id bigint PRIMARY KEY, v int)`); err != nil {
		return Drain{}, fmt.Errorf("create bench_live: %w", err)
	}
	rcv, err := startReceiver(true)
	if err != nil {
		return Drain{}, err
	}
	defer rcv.close()
	name := fmt.Sprintf("backfill_%d", run)
	slot := "b_fill_" + fmt.Sprint(run)
	pipeline := fmt.Sprintf(`pipeline = %q

source "postgres" {
  dsn         = %q
  tables      = ["public.bench", "public.bench_live"]
  slot        = %q
  publication = "bench_fill_pub"
}

sink "stdout" "out" {
  delivery {
    batch_size = 1000
  }
  config {
    path = "/dev/null"
  }
}

sink "webhook" "live" {
  delivery {
    batch_size = 100
  }
  config {
    url = %q
  }
}
`, name, e.dsn, slot, rcv.url)
	path := filepath.Join(e.work, name+".hcl")
	if err := os.WriteFile(path, []byte(pipeline), 0o644); err != nil {
		return Drain{}, err
	}
	logf, err := os.Create(filepath.Join(e.work, name+".log"))
	if err != nil {
		return Drain{}, err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(e.cfg.BinDir, "walcast"), "run", "-log-level", "info", path)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = time.Minute
	if err := cmd.Start(); err != nil {
		logf.Close()
		return Drain{}, err
	}
	exited := make(chan struct{})
	waitErr := new(error)
	go func() { *waitErr = cmd.Wait(); logf.Close(); close(exited) }()
	defer func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-exited
		}
		// The pipeline's slot would keep WAL for the paths after it.
		e.dropSlot(context.Background(), slot)
	}()
	// walcast creates the slot as it starts.
	for deadline := time.Now().Add(time.Minute); ; {
		var active bool
		err := poll.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return Drain{}, fmt.Errorf("poll slot %s: %w", slot, err)
		}
		if active {
			break
		}
		select {
		case <-exited:
			return Drain{}, fmt.Errorf("walcast exited before streaming\n%s", e.tailLog(name))
		default:
		}
		if time.Now().After(deadline) {
			return Drain{}, fmt.Errorf("walcast did not stream within a minute\n%s", e.tailLog(name))
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The live writer runs from before the request until every sink has
	// the backfill.
	wconn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return Drain{}, err
	}
	defer wconn.Close(context.Background())
	stopLive := make(chan struct{})
	liveErr := make(chan error, 1)
	go func() {
		tick := time.NewTicker(time.Second / backfillLiveRate)
		defer tick.Stop()
		for i := int64(1); ; i++ {
			select {
			case <-stopLive:
				liveErr <- nil
				return
			case <-tick.C:
			}
			if _, err := wconn.Exec(ctx, `INSERT INTO bench_live VALUES ($1, 0) ON CONFLICT (id) DO UPDATE SET v = bench_live.v + 1`, i); err != nil {
				liveErr <- fmt.Errorf("live writer: %w", err)
				return
			}
		}
	}()
	stopWriter := func() error {
		select {
		case <-stopLive:
			return nil
		default:
		}
		close(stopLive)
		return <-liveErr
	}
	defer stopWriter()
	time.Sleep(time.Second) // the live stream is flowing before the backfill starts

	var walStart uint64
	if err := poll.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn`).Scan(&walStart); err != nil {
		return Drain{}, err
	}
	rcv.mu.Lock()
	rcv.lat = rcv.lat[:0]
	rcv.mu.Unlock()
	t0 := time.Now()
	if out, err := exec.CommandContext(ctx, filepath.Join(e.cfg.BinDir, "walcast"), "backfill", path, "--table", "public.bench", "--sink", "out").CombinedOutput(); err != nil {
		return Drain{}, fmt.Errorf("walcast backfill: %w: %s", err, out)
	}
	var rows int64
	for deadline := time.Now().Add(drainTimeout); ; {
		var state string
		err := poll.QueryRow(ctx, `SELECT state, rows_done FROM walcast.backfills WHERE pipeline = $1 ORDER BY id DESC LIMIT 1`, name).Scan(&state, &rows)
		if err != nil {
			return Drain{}, fmt.Errorf("poll backfill: %w", err)
		}
		if state == "done" {
			break
		}
		if state != "queued" && state != "running" {
			return Drain{}, fmt.Errorf("backfill ended %s\n%s", state, e.tailLog(name))
		}
		select {
		case <-exited:
			return Drain{}, fmt.Errorf("walcast exited during the backfill\n%s", e.tailLog(name))
		default:
		}
		if time.Now().After(deadline) {
			return Drain{}, errors.New("backfill did not finish in time")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var walDone uint64
	if err := poll.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn`).Scan(&walDone); err != nil {
		return Drain{}, err
	}
	// Every sink has the last chunk once the slot is confirmed past it.
	t1, err := e.waitConfirmed(ctx, poll, slot, walDone, exited, drainTimeout)
	if err != nil {
		return Drain{}, fmt.Errorf("walcast: %w\n%s", err, e.tailLog(name))
	}
	if err := stopWriter(); err != nil {
		return Drain{}, err
	}
	rcv.mu.Lock()
	lat := slices.Clone(rcv.lat)
	rcv.mu.Unlock()
	slices.Sort(lat)
	host, _ := readProc(cmd.Process.Pid)
	plugin := childrenUsage(cmd.Process.Pid)
	secs := t1.Sub(t0).Seconds()
	fill := &BackfillRun{Rows: rows, WALPerRow: float64(walDone-walStart) / float64(max(rows, 1)), LiveEvents: len(lat)}
	if n := len(lat); n > 0 {
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		fill.LiveP50ms, fill.LiveP99ms, fill.LiveMaxms = ms(lat[n/2]), ms(lat[n*99/100]), ms(lat[n-1])
	}
	e.logf("  backfill: %d rows, %.0f bytes of WAL per row; %d live changes meanwhile, p50 %.0f ms p99 %.0f ms max %.0f ms",
		rows, fill.WALPerRow, fill.LiveEvents, fill.LiveP50ms, fill.LiveP99ms, fill.LiveMaxms)
	d := Drain{
		Seconds:       secs,
		ChangesPerSec: float64(rows) / secs,
		HostRSSMiB:    float64(host.HWMKiB) / 1024,
		PluginRSSMiB:  float64(plugin.HWMKiB) / 1024,
		HostCPU:       host.CPU,
		PluginCPU:     plugin.CPU,
		Backfill:      fill,
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(time.Minute):
		return d, errors.New("walcast did not stop within a minute of SIGTERM")
	}
	return d, nil
}
