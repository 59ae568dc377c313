package lineage

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Shape is a captured table's shape at a position of the stream
// (walcast.table_shapes).
type Shape struct {
	RelationID uint32
	At         cdc.EventID
	Shape      []byte
}

// Shapes returns every shape recorded for the pipeline (none when the
// walcast schema does not exist yet).
func (s *Store) Shapes(ctx context.Context) ([]Shape, error) {
	rows, err := s.db.Query(ctx, `SELECT relation_id, commit_lsn, idx, shape::text FROM walcast.table_shapes WHERE pipeline = $1`, s.pipeline)
	if control.NoSchema(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load table shapes of pipeline %s: %w", s.pipeline, err)
	}
	var out []Shape
	var rel, lsn, idx int64
	var shape string
	if _, err := pgx.ForEachRow(rows, []any{&rel, &lsn, &idx, &shape}, func() error {
		out = append(out, Shape{RelationID: uint32(rel), At: cdc.EventID{CommitLSN: uint64(lsn), Index: uint64(idx)}, Shape: []byte(shape)})
		return nil
	}); err != nil {
		return nil, fmt.Errorf("load table shapes of pipeline %s: %w", s.pipeline, err)
	}
	return out, nil
}

// RecordShape stores sh, replacing a shape of the same table at the same
// position. The column is json, which keeps the bytes as given.
func (s *Store) RecordShape(ctx context.Context, sh Shape) error {
	_, err := s.db.Exec(ctx, `
INSERT INTO walcast.table_shapes (pipeline, relation_id, commit_lsn, idx, shape) VALUES ($1, $2, $3, $4, $5::json)
ON CONFLICT (pipeline, relation_id, commit_lsn, idx) DO UPDATE SET shape = excluded.shape, recorded_at = now()`,
		s.pipeline, int64(sh.RelationID), int64(sh.At.CommitLSN), int64(sh.At.Index), string(sh.Shape))
	if err != nil {
		return fmt.Errorf("record the shape of relation %d at %s for pipeline %s: %w", sh.RelationID, sh.At, s.pipeline, err)
	}
	return nil
}
