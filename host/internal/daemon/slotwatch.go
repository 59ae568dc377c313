package daemon

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// slotWatch warns before PostgreSQL invalidates the slot: when its
// wal_status becomes "unreserved" (past max_wal_size, removed at the next
// checkpoint unless max_slot_wal_keep_size still covers it) or the WAL it
// retains passes a threshold. An invalidated slot loses changes for good,
// so the warning has to come while a slow sink can still catch up.
type slotWatch struct {
	pool      *pgxpool.Pool
	slot      string
	threshold int64
	every     time.Duration
	log       *slog.Logger

	atRisk prometheus.Gauge
}

func newSlotWatch(pool *pgxpool.Pool, slot string, threshold int64, every time.Duration, log *slog.Logger) *slotWatch {
	return &slotWatch{
		pool: pool, slot: slot, threshold: threshold, every: every, log: log,
		atRisk: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "walcast_slot_wal_at_risk",
			Help: "1 while the slot's wal_status is unreserved or lost, or it retains more WAL than --warn-retained-wal-mb.",
		}),
	}
}

// collectors are the watch's metrics. The slot's retained WAL itself is
// walcast_slot_retained_wal_bytes, which the pipeline collector reads from
// PostgreSQL at scrape time.
func (w *slotWatch) collectors() []prometheus.Collector {
	return []prometheus.Collector{w.atRisk}
}

// run checks the slot every w.every until ctx ends.
func (w *slotWatch) run(ctx context.Context) {
	t := time.NewTicker(w.every)
	defer t.Stop()
	warned := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var status string
		var retained int64
		err := w.pool.QueryRow(ctx, `
SELECT coalesce(wal_status, ''), coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint
FROM pg_replication_slots WHERE slot_name = $1`, w.slot).Scan(&status, &retained)
		if err != nil {
			continue // gone or unreachable: capture reports that
		}
		risk := status == "unreserved" || status == "lost" || (w.threshold > 0 && retained > w.threshold)
		if risk {
			w.atRisk.Set(1)
		} else {
			w.atRisk.Set(0)
		}
		switch {
		case risk && !warned:
			w.log.Warn("replication slot at risk of invalidation: a sink is behind and the slot retains a lot of WAL; if PostgreSQL invalidates it (max_slot_wal_keep_size) the changes it holds are lost",
				"slot", w.slot, "wal_status", status, "retained_bytes", retained, "warn_threshold_bytes", w.threshold)
		case !risk && warned:
			w.log.Info("replication slot no longer at risk", "slot", w.slot, "wal_status", status, "retained_bytes", retained)
		}
		warned = risk
	}
}
