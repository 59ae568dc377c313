package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// latency streams LatencyRate changes/s for LatencyDuration through the
// daemon and the webhook sink (default delivery policy) and measures
// commit time → arrival at the receiver.
func (e *env) latency(ctx context.Context) (*Latency, error) {
	cfg := e.cfg
	slot := "b_latency"
	if err := e.createSlot(ctx, slot); err != nil {
		return nil, err
	}
	poll, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return nil, err
	}
	defer poll.Close(context.Background())
	rcv, err := startReceiver(true)
	if err != nil {
		return nil, err
	}
	defer rcv.close()
	d := daemonRun{name: "latency", slot: slot, rcv: rcv, sink: fmt.Sprintf(`sink "webhook" "hook" {
  config {
    url = %q
  }
}`, rcv.url)}
	p, err := e.startDaemon(ctx, d)
	if err != nil {
		return nil, err
	}
	defer p.kill()
	if _, err := e.waitActive(ctx, poll, slot, p.exited); err != nil {
		return nil, fmt.Errorf("walcast: %w\n%s", err, e.tailLog(d.name))
	}

	// Ten-row transactions at an even pace; updates of existing rows (or
	// inserts above the workload's ids when it left none).
	const txRows = 10
	every := time.Second * txRows / time.Duration(cfg.LatencyRate)
	total := int(cfg.LatencyDuration / every)
	base := int64(cfg.Inserts + 10_000_000)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := range total {
		lo := base + int64(i*txRows)
		if _, err := e.conn.Exec(ctx, insertSQL, lo, lo+txRows-1); err != nil {
			return nil, err
		}
		<-tick.C
	}
	n := int64(total * txRows)
	if _, err := rcv.wait(n, p.exited, time.Minute); err != nil {
		return nil, fmt.Errorf("walcast: %w\n%s", err, e.tailLog(d.name))
	}
	if err := e.stopDaemon(p); err != nil {
		return nil, err
	}
	if err := e.dropSlot(ctx, slot); err != nil {
		return nil, err
	}
	rcv.mu.Lock()
	lat := slices.Clone(rcv.lat)
	rcv.mu.Unlock()
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	q := func(p float64) time.Duration { return lat[min(int(p*float64(len(lat))), len(lat)-1)] }
	return &Latency{
		Rate: cfg.LatencyRate, Seconds: cfg.LatencyDuration.Seconds(), Events: len(lat),
		P50ms: ms(q(0.50)), P99ms: ms(q(0.99)), Maxms: ms(lat[len(lat)-1]),
	}, nil
}

// bigTx inserts BigTx rows in one transaction and drains it with the
// daemon and the stdout sink, reporting the host's peak RSS.
func (e *env) bigTx(ctx context.Context) (*BigTx, error) {
	slot := "b_bigtx"
	if err := e.createSlot(ctx, slot); err != nil {
		return nil, err
	}
	base := int64(cfg2base(e.cfg))
	if _, err := e.conn.Exec(ctx, insertSQL, base, base+int64(e.cfg.BigTx)-1); err != nil {
		return nil, err
	}
	var end uint64
	if err := e.conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn`).Scan(&end); err != nil {
		return nil, err
	}
	poll, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return nil, err
	}
	defer poll.Close(context.Background())
	d := daemonRun{name: "bigtx", slot: slot, sink: `sink "stdout" "out" {
  config {
    path = "/dev/null"
  }
}`}
	p, err := e.startDaemon(ctx, d)
	if err != nil {
		return nil, err
	}
	defer p.kill()
	t0, err := e.waitActive(ctx, poll, slot, p.exited)
	if err != nil {
		return nil, fmt.Errorf("walcast: %w\n%s", err, e.tailLog(d.name))
	}
	t1, err := e.waitConfirmed(ctx, poll, slot, end, p.exited, drainTimeout)
	if err != nil {
		return nil, fmt.Errorf("walcast: %w\n%s", err, e.tailLog(d.name))
	}
	host, _ := readProc(p.pid())
	plugin := childrenUsage(p.pid())
	if err := e.stopDaemon(p); err != nil {
		return nil, err
	}
	if err := e.dropSlot(ctx, slot); err != nil {
		return nil, err
	}
	secs := t1.Sub(t0).Seconds()
	return &BigTx{
		Rows: e.cfg.BigTx, Seconds: secs, ChangesPerSec: float64(e.cfg.BigTx) / secs,
		HostRSSMiB: float64(host.HWMKiB) / 1024, PluginRSSMiB: float64(plugin.HWMKiB) / 1024,
	}, nil
}

// cfg2base is the first id of the big transaction: above the workload and
// the latency rows.
func cfg2base(c Config) int { return c.Inserts + 50_000_000 }
