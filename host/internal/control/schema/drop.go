package schema

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/host/internal/pg"
)

// Forget deletes every row of pipeline in the walcast schema: its record,
// checkpoints, parked events, replay requests, usage, pauses, sink
// failures, accepted gaps, backfills, catch-up slots, reported backlogs
// and streams, published tables, table shapes, partitions seen and leadership record. The list is kept
// here, beside the DDL, so that a new table is not forgotten.
func Forget(ctx context.Context, db control.Querier, pipeline string) error {
	for _, table := range []string{"checkpoints", "parked", "replay_requests", "usage", "pauses", "sink_failures", "gaps", "backfills", "backfill_tables", "catchup_slots", "sink_backlog", "streams", "published_tables", "table_shapes", "partitions", "leaderships", "pipelines"} {
		if _, err := db.Exec(ctx, `DELETE FROM walcast.`+table+` WHERE pipeline = $1`, pipeline); err != nil {
			if control.NoSchema(err) {
				continue // never initialised: nothing to forget
			}
			return fmt.Errorf("delete walcast.%s rows of pipeline %s: %w", table, pipeline, err)
		}
	}
	return nil
}

// DropUnused drops the walcast schema when none of its tables holds a row
// of another pipeline than this one: a start of pipeline that created the
// schema and then failed removes it. It runs under the migration lock, so
// that it never drops a schema another start is migrating, and reports
// whether it dropped it.
func DropUnused(ctx context.Context, db control.Querier, pipeline string) (bool, error) {
	b, ok := db.(control.Beginner)
	if !ok {
		return false, fmt.Errorf("drop walcast schema: %T cannot begin a transaction", db)
	}
	tx, err := b.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("drop walcast schema: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLock)); err != nil {
		return false, fmt.Errorf("drop walcast schema: take lock: %w", err)
	}
	rows, err := tx.Query(ctx, `
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'pipeline' AND NOT a.attisdropped
WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY 1`, pg.ControlSchema)
	if err != nil {
		return false, fmt.Errorf("drop walcast schema: list its tables: %w", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, fmt.Errorf("drop walcast schema: list its tables: %w", err)
	}
	for _, t := range tables {
		var used bool
		q := `SELECT EXISTS (SELECT 1 FROM ` + pgx.Identifier{pg.ControlSchema, t}.Sanitize() + ` WHERE pipeline <> $1)`
		if err := tx.QueryRow(ctx, q, pipeline).Scan(&used); err != nil {
			return false, fmt.Errorf("drop walcast schema: read walcast.%s: %w", t, err)
		}
		if used {
			return false, nil
		}
	}
	if _, err := tx.Exec(ctx, `DROP SCHEMA IF EXISTS `+pg.ControlSchema+` CASCADE`); err != nil {
		return false, fmt.Errorf("drop walcast schema: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("drop walcast schema: commit: %w", err)
	}
	return true, nil
}
