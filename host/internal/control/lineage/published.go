package lineage

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/control"
)

// Published returns the recorded membership of each table (empty when
// none was recorded, or by a walcast that did not record it).
func (s *Store) Published(ctx context.Context) (map[string]string, error) {
	rows, err := s.db.Query(ctx, `SELECT table_name, membership FROM walcast.published_tables WHERE pipeline = $1`, s.pipeline)
	if control.NoSchema(err) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load published tables of pipeline %s: %w", s.pipeline, err)
	}
	out := map[string]string{}
	var table, m string
	if _, err := pgx.ForEachRow(rows, []any{&table, &m}, func() error {
		out[table] = m
		return nil
	}); err != nil {
		return nil, fmt.Errorf("load published tables of pipeline %s: %w", s.pipeline, err)
	}
	return out, nil
}

// RecordPublished replaces the recorded membership with m.
func (s *Store) RecordPublished(ctx context.Context, m map[string]string) error {
	tables := make([]string, 0, len(m))
	ms := make([]string, 0, len(m))
	for t, v := range m {
		tables, ms = append(tables, t), append(ms, v)
	}
	_, err := s.db.Exec(ctx, `
WITH gone AS (DELETE FROM walcast.published_tables WHERE pipeline = $1 AND NOT (table_name = ANY($2::text[])))
INSERT INTO walcast.published_tables (pipeline, table_name, membership)
SELECT $1, u.t, u.m FROM unnest($2::text[], $3::text[]) AS u(t, m)
ON CONFLICT (pipeline, table_name) DO UPDATE SET membership = excluded.membership, recorded_at = now()
WHERE walcast.published_tables.membership IS DISTINCT FROM excluded.membership`, s.pipeline, tables, ms)
	if err != nil {
		return fmt.Errorf("record published tables of pipeline %s: %w", s.pipeline, err)
	}
	return nil
}
