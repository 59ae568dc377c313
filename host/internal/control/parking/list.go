package parking

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// ParkedRows returns the rows of sink that have parked events (an update
// that changed the key counts for both its rows): later events of those
// rows are parked behind them.
func (s *Store) ParkedRows(ctx context.Context, sink string) ([]string, error) {
	rows, err := s.db.Query(ctx, `
SELECT row_key FROM walcast.parked WHERE pipeline = $1 AND sink = $2
UNION
SELECT old_row_key FROM walcast.parked WHERE pipeline = $1 AND sink = $2 AND old_row_key <> ''`, s.pipeline, sink)
	if err != nil {
		return nil, fmt.Errorf("load parked rows of sink %s: %w", sink, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ListParked returns the parked events of sink (every sink when empty),
// oldest first per row; row limits the result to one row when not empty
// (with the updates that moved a key away from it).
func (s *Store) ListParked(ctx context.Context, sink, row string) ([]Event, error) {
	rows, err := s.db.Query(ctx, `
SELECT sink, commit_lsn::text AS lsn_text, idx, row_key, old_row_key, schema_name, table_name, op, key, payload, attempts, last_error,
	first_failed_at, last_failed_at
FROM walcast.parked
WHERE pipeline = $1 AND ($2 = '' OR sink = $2) AND ($3 = '' OR row_key = $3 OR old_row_key = $3)
ORDER BY sink, commit_lsn, idx`, s.pipeline, sink, row)
	if err != nil {
		return nil, fmt.Errorf("list parked events: %w", err)
	}
	return scanParked(rows)
}

// ListParkedTable returns the parked events of one table of sink, oldest
// first: a replay needs them all to deliver, before an event, whatever
// the table's truncates order before it.
func (s *Store) ListParkedTable(ctx context.Context, sink, schema, table string) ([]Event, error) {
	rows, err := s.db.Query(ctx, `
SELECT sink, commit_lsn::text AS lsn_text, idx, row_key, old_row_key, schema_name, table_name, op, key, payload, attempts, last_error,
	first_failed_at, last_failed_at
FROM walcast.parked
WHERE pipeline = $1 AND sink = $2 AND schema_name = $3 AND table_name = $4
ORDER BY commit_lsn, idx`, s.pipeline, sink, schema, table)
	if err != nil {
		return nil, fmt.Errorf("list parked events of %s.%s: %w", schema, table, err)
	}
	return scanParked(rows)
}

// RecentParked returns the limit most recently failed parked events of
// the pipeline, newest failure first: what an operator looks at first,
// without loading every payload of a sink that parked thousands.
func (s *Store) RecentParked(ctx context.Context, limit int) ([]Event, error) {
	rows, err := s.db.Query(ctx, `
SELECT sink, commit_lsn::text AS lsn_text, idx, row_key, old_row_key, schema_name, table_name, op, key, payload, attempts, last_error,
	first_failed_at, last_failed_at
FROM walcast.parked
WHERE pipeline = $1
ORDER BY last_failed_at DESC, sink, commit_lsn, idx
LIMIT $2`, s.pipeline, limit)
	if err != nil {
		return nil, fmt.Errorf("list recently parked events: %w", err)
	}
	return scanParked(rows)
}

func scanParked(rows pgx.Rows) ([]Event, error) {
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var p Event
		var lsn, op string
		var idx int64
		if err := rows.Scan(&p.Sink, &lsn, &idx, &p.Row, &p.OldRow, &p.Event.Schema, &p.Event.Table, &op, &p.Event.Key, &p.Event.Payload,
			&p.Attempts, &p.LastError, &p.FirstFailure, &p.LastFailure); err != nil {
			return nil, fmt.Errorf("list parked events: %w", err)
		}
		l, err := cdc.ParseLSN(lsn)
		if err != nil {
			return nil, err
		}
		p.Event.ID = cdc.EventID{CommitLSN: l, Index: uint64(idx)}
		p.Event.Op = cdc.Op(op)
		out = append(out, p)
	}
	return out, rows.Err()
}

// Summary is one sink's parked events in brief.
type Summary struct {
	Count int
	// LastError and LastFailure are those of the most recently failed
	// parked event.
	LastError   string
	LastFailure time.Time
}

// SummarizeParked returns, for each sink with parked events, how many it
// has and its latest error.
func (s *Store) SummarizeParked(ctx context.Context) (map[string]Summary, error) {
	rows, err := s.db.Query(ctx, `
SELECT DISTINCT ON (sink) sink, count(*) OVER (PARTITION BY sink), last_error, last_failed_at
FROM walcast.parked
WHERE pipeline = $1
ORDER BY sink, last_failed_at DESC, commit_lsn DESC, idx DESC`, s.pipeline)
	if err != nil {
		return nil, fmt.Errorf("summarize parked events: %w", err)
	}
	defer rows.Close()
	out := map[string]Summary{}
	for rows.Next() {
		var sink string
		var ps Summary
		if err := rows.Scan(&sink, &ps.Count, &ps.LastError, &ps.LastFailure); err != nil {
			return nil, fmt.Errorf("summarize parked events: %w", err)
		}
		out[sink] = ps
	}
	return out, rows.Err()
}

// ParkedRowOf returns the row of a parked event, or "" when it is not parked.
func (s *Store) ParkedRowOf(ctx context.Context, sink string, id cdc.EventID) (string, error) {
	rows, err := s.db.Query(ctx, `SELECT row_key FROM walcast.parked WHERE pipeline = $1 AND sink = $2 AND commit_lsn = $3::pg_lsn AND idx = $4`,
		s.pipeline, sink, cdc.FormatLSN(id.CommitLSN), int64(id.Index))
	if err != nil {
		return "", fmt.Errorf("look up parked event %s: %w", id, err)
	}
	defer rows.Close()
	var row string
	for rows.Next() {
		if err := rows.Scan(&row); err != nil {
			return "", err
		}
	}
	return row, rows.Err()
}

// CountParked returns how many events of the pipeline are parked; zero when
// the walcast schema does not exist.
func (s *Store) CountParked(ctx context.Context) (int, error) {
	var n int
	err := s.db.QueryRow(ctx, `SELECT count(*) FROM walcast.parked WHERE pipeline = $1`, s.pipeline).Scan(&n)
	if control.NoSchema(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("count parked events: %w", err)
	}
	return n, nil
}
