package bench

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

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
