package backfill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walcast/walcast/host/internal/pg"
)

// Querier is the part of pgx the store and Inspect need
// (*pgxpool.Pool, *pgx.Conn, pgx.Tx). The backfill tables are part of the
// walcast schema: whoever calls them has migrated it.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// States of a backfill.
const (
	StateQueued    = "queued"
	StateRunning   = "running"
	StateDone      = "done"
	StateCancelled = "cancelled"
	StateFailed    = "failed"
)

// Backfill is one row of walcast.backfills.
type Backfill struct {
	ID       int64
	Pipeline string
	Table    string // schema.table
	Sinks    []string
	State    string
	Reason   string
	Rows     int64
	Chunks   int64
	Estimate int64
	Created  time.Time
	Started  *time.Time
	Updated  time.Time
	Finished *time.Time
	// Resync is set for a resync (walcast resync): its rows are
	// bracketed by a resync_begin and a resync_end marker.
	Resync bool
}

// Active reports whether the backfill is queued or running.
func (b Backfill) Active() bool { return b.State == StateQueued || b.State == StateRunning }

// SinksText is the target sinks for humans.
func (b Backfill) SinksText() string {
	if len(b.Sinks) == 0 {
		return "all"
	}
	return strings.Join(b.Sinks, ",")
}

const selectBackfill = `SELECT id, pipeline, schema_name || '.' || table_name, sinks, state, reason, rows_done, chunks_done,
	estimate, created_at, started_at, updated_at, finished_at, resync FROM walcast.backfills`

func scanBackfill(row pgx.Row) (Backfill, error) {
	var b Backfill
	err := row.Scan(&b.ID, &b.Pipeline, &b.Table, &b.Sinks, &b.State, &b.Reason, &b.Rows, &b.Chunks, &b.Estimate,
		&b.Created, &b.Started, &b.Updated, &b.Finished, &b.Resync)
	return b, err
}

// List returns the pipeline's backfills, oldest first.
func List(ctx context.Context, db Querier, pipeline string) ([]Backfill, error) {
	rows, err := db.Query(ctx, selectBackfill+` WHERE pipeline = $1 ORDER BY id`, pipeline)
	if err != nil {
		return nil, fmt.Errorf("list backfills of pipeline %s: %w", pipeline, err)
	}
	defer rows.Close()
	var out []Backfill
	for rows.Next() {
		b, err := scanBackfill(rows)
		if err != nil {
			return nil, fmt.Errorf("list backfills: %w", err)
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list backfills: %w", err)
	}
	return out, nil
}

// Get returns one backfill.
func Get(ctx context.Context, db Querier, id int64) (Backfill, error) {
	b, err := scanBackfill(db.QueryRow(ctx, selectBackfill+` WHERE id = $1`, id))
	if err != nil {
		return b, fmt.Errorf("read backfill %d: %w", id, err)
	}
	return b, nil
}

// ErrDuplicate is wrapped by Request when the table already has an
// active backfill for one of the sinks.
var ErrDuplicate = errors.New("already being backfilled")

// overlap reports whether two sink sets share a sink (empty is every sink).
func overlap(a, b []string) bool {
	if len(a) == 0 || len(b) == 0 {
		return true
	}
	for _, s := range a {
		if slices.Contains(b, s) {
			return true
		}
	}
	return false
}

// TxBeginner starts transactions (*pgxpool.Pool, *pgx.Conn).
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Request queues a backfill of each table (already checked with Inspect)
// for sinks (empty: every sink) and wakes a running daemon. Nothing is
// written when one of the tables already has an active backfill for one of
// the sinks.
func Request(ctx context.Context, db TxBeginner, pipeline string, tables []Table, sinks []string) ([]int64, error) {
	return request(ctx, db, pipeline, tables, sinks, false)
}

// RequestResync is Request for resyncs: each table's rows are bracketed
// by a resync_begin and a resync_end marker for the sinks. The same
// refusals apply (a table with an active backfill or resync for one of
// the sinks is refused, ErrDuplicate).
func RequestResync(ctx context.Context, db TxBeginner, pipeline string, tables []Table, sinks []string) ([]int64, error) {
	return request(ctx, db, pipeline, tables, sinks, true)
}

func request(ctx context.Context, db TxBeginner, pipeline string, tables []Table, sinks []string, resync bool) ([]int64, error) {
	if sinks == nil {
		sinks = []string{}
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("request backfill: %w", err)
	}
	defer tx.Rollback(context.Background())
	// One request at a time per pipeline, so two cannot both find no
	// duplicate.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('walcast.backfill:' || $1))`, pipeline); err != nil {
		return nil, fmt.Errorf("request backfill: %w", err)
	}
	ids := make([]int64, 0, len(tables))
	for _, t := range tables {
		// A backfill of one partition (Table.Partition) duplicates only
		// one of the same partition.
		rows, err := tx.Query(ctx, `SELECT id, sinks, resync FROM walcast.backfills
WHERE pipeline = $1 AND schema_name = $2 AND table_name = $3 AND state IN ('queued', 'running')
  AND partition_oid IS NOT DISTINCT FROM $4 ORDER BY id`, pipeline, t.Schema, t.Name, partitionOID(t))
		if err != nil {
			return nil, fmt.Errorf("request backfill of %s: %w", t, err)
		}
		var dup int64
		dupKind := "backfill"
		for rows.Next() {
			var id int64
			var have []string
			var isResync bool
			if err := rows.Scan(&id, &have, &isResync); err != nil {
				rows.Close()
				return nil, fmt.Errorf("request backfill of %s: %w", t, err)
			}
			if dup == 0 && overlap(have, sinks) {
				dup = id
				if isResync {
					dupKind = "resync"
				}
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("request backfill of %s: %w", t, err)
		}
		if dup != 0 {
			return nil, fmt.Errorf("table %s is %w for these sinks by %s %d (wait for it, or cancel it with --cancel)", t, ErrDuplicate, dupKind, dup)
		}
		var id int64
		err = tx.QueryRow(ctx, `INSERT INTO walcast.backfills (pipeline, schema_name, table_name, sinks, resync, partition_oid)
VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`, pipeline, t.Schema, t.Name, sinks, resync, partitionOID(t)).Scan(&id)
		if err != nil {
			return nil, fmt.Errorf("request backfill of %s: %w", t, err)
		}
		ids = append(ids, id)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, 'backfill')`, pg.ControlChannel); err != nil {
		return nil, fmt.Errorf("request backfill: notify: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("request backfill: %w", err)
	}
	return ids, nil
}

// Cancel cancels the active backfills of table for sinks (empty: all of
// the table's active backfills) and returns their ids. Chunks already
// written into the WAL are still delivered.
func Cancel(ctx context.Context, db Querier, pipeline string, t Table, sinks []string) ([]int64, error) {
	rows, err := db.Query(ctx, `SELECT id, sinks FROM walcast.backfills
WHERE pipeline = $1 AND schema_name = $2 AND table_name = $3 AND state IN ('queued', 'running')`, pipeline, t.Schema, t.Name)
	if err != nil {
		return nil, fmt.Errorf("cancel backfill of %s: %w", t, err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		var have []string
		if err := rows.Scan(&id, &have); err != nil {
			rows.Close()
			return nil, fmt.Errorf("cancel backfill of %s: %w", t, err)
		}
		if len(sinks) == 0 || overlap(have, sinks) {
			ids = append(ids, id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("cancel backfill of %s: %w", t, err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	_, err = db.Exec(ctx, `UPDATE walcast.backfills SET state = 'cancelled', updated_at = now(), finished_at = now()
WHERE id = ANY($1) AND state IN ('queued', 'running')`, ids)
	if err != nil {
		return nil, fmt.Errorf("cancel backfill of %s: %w", t, err)
	}
	return ids, nil
}

// NewTables records tables as seen by the pipeline and returns those it
// had not seen before (all of them at the pipeline's first start).
func NewTables(ctx context.Context, db Querier, pipeline string, tables []string) ([]string, error) {
	var fresh []string
	for _, t := range tables {
		tag, err := db.Exec(ctx, `INSERT INTO walcast.backfill_tables (pipeline, table_name) VALUES ($1, $2) ON CONFLICT DO NOTHING`, pipeline, t)
		if err != nil {
			return nil, fmt.Errorf("record table %s: %w", t, err)
		}
		if tag.RowsAffected() == 1 {
			fresh = append(fresh, t)
		}
	}
	return fresh, nil
}

// partitionOID is the partition_oid column of a backfill of t: NULL for
// the whole table.
func partitionOID(t Table) *int64 {
	if t.Partition == 0 {
		return nil
	}
	oid := int64(t.Partition)
	return &oid
}
