package daemon

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// slotWatch warns before PostgreSQL invalidates the slot: when its
// wal_status becomes "unreserved" (past max_wal_size, removed at the next
// checkpoint unless max_slot_wal_keep_size still covers it) or the WAL it
// retains passes a threshold. An invalidated slot loses changes for good,
// so the warning has to come while a slow sink can still catch up. The
// catch-up slots of detached sinks (package isolate) are watched the same
// way: once a slow sink detaches, its slot holds the WAL it needs, not the
// pipeline's. The term's watch (see openTerm) runs check on every tick,
// one tick at a time.
type slotWatch struct {
	pool      *pgxpool.Pool
	pipeline  string
	slot      string
	threshold int64
	log       *slog.Logger
	// warned: the slots warned about and not yet said to be safe again.
	warned map[string]bool

	atRisk prometheus.Gauge
}

func newSlotWatch(pool *pgxpool.Pool, pipeline, slot string, threshold int64, log *slog.Logger) *slotWatch {
	return &slotWatch{
		pool: pool, pipeline: pipeline, slot: slot, threshold: threshold, log: log, warned: map[string]bool{},
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

// check looks at the slots once. It never stops the stream: an
// unreachable database is the stream's to report, and a slot at risk is a
// warning and a metric until PostgreSQL actually invalidates it.
func (w *slotWatch) check(ctx context.Context) {
	warned := w.warned
	rows, err := w.pool.Query(ctx, `
SELECT slot_name::text, coalesce(wal_status, ''), coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint
FROM pg_replication_slots
WHERE slot_name = $1 OR slot_name IN (SELECT slot FROM walcast.catchup_slots WHERE pipeline = $2)`, w.slot, w.pipeline)
	if err != nil {
		return // unreachable: capture reports that
	}
	var name, status string
	var retained int64
	atRisk := false
	seen := map[string]bool{}
	_, err = pgx.ForEachRow(rows, []any{&name, &status, &retained}, func() error {
		seen[name] = true
		risk := status == "unreserved" || status == "lost" || (w.threshold > 0 && retained > w.threshold)
		atRisk = atRisk || risk
		switch {
		case risk && !warned[name]:
			w.log.Warn("replication slot at risk of invalidation: a sink is behind and the slot retains a lot of WAL; if PostgreSQL invalidates it (max_slot_wal_keep_size) the changes it holds are lost",
				"slot", name, "wal_status", status, "retained_bytes", retained, "warn_threshold_bytes", w.threshold)
		case !risk && warned[name]:
			w.log.Info("replication slot no longer at risk", "slot", name, "wal_status", status, "retained_bytes", retained)
		}
		warned[name] = risk
		return nil
	})
	if err != nil {
		return
	}
	for name := range warned {
		if !seen[name] {
			delete(warned, name) // dropped: a catch-up slot after its sink rejoined
		}
	}
	if atRisk {
		w.atRisk.Set(1)
	} else {
		w.atRisk.Set(0)
	}
}
