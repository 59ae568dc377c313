package checkpoints

import (
	"context"
	"fmt"

	"github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Store reads and writes one pipeline's checkpoints.
type Store struct {
	db       control.Querier
	pipeline string
}

// New returns the checkpoints of pipeline, read and written on db.
func New(db control.Querier, pipeline string) *Store {
	return &Store{db: db, pipeline: pipeline}
}

// Load returns the checkpoint of every sink of the pipeline.
func (s *Store) Load(ctx context.Context) (map[string]cdc.EventID, error) {
	rows, err := s.db.Query(ctx,
		`SELECT sink, commit_lsn::text, idx FROM walcast.checkpoints WHERE pipeline = $1`, s.pipeline)
	if err != nil {
		return nil, fmt.Errorf("load checkpoints of pipeline %s: %w", s.pipeline, err)
	}
	defer rows.Close()
	out := map[string]cdc.EventID{}
	for rows.Next() {
		var sink, lsn string
		var idx int64
		if err := rows.Scan(&sink, &lsn, &idx); err != nil {
			return nil, fmt.Errorf("load checkpoints: %w", err)
		}
		l, err := cdc.ParseLSN(lsn)
		if err != nil {
			return nil, fmt.Errorf("load checkpoint of sink %s: %w", sink, err)
		}
		out[sink] = cdc.EventID{CommitLSN: l, Index: uint64(idx)}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load checkpoints: %w", err)
	}
	return out, nil
}

// Save writes the given positions of the sinks as their checkpoints, in
// one statement. A checkpoint never moves backwards: a stored one that is
// higher is kept.
func (s *Store) Save(ctx context.Context, positions map[string]cdc.EventID) error {
	if len(positions) == 0 {
		return nil
	}
	sinks := make([]string, 0, len(positions))
	ids := make([]string, 0, len(positions))
	lsns := make([]string, 0, len(positions))
	idxs := make([]int64, 0, len(positions))
	for sink, id := range positions {
		if id.IsZero() {
			continue
		}
		sinks = append(sinks, sink)
		ids = append(ids, id.String())
		lsns = append(lsns, cdc.FormatLSN(id.CommitLSN))
		idxs = append(idxs, int64(id.Index))
	}
	if len(sinks) == 0 {
		return nil
	}
	_, err := s.db.Exec(ctx, `
INSERT INTO walcast.checkpoints AS c (pipeline, sink, event_id, commit_lsn, idx, updated_at)
SELECT $1, u.sink, u.event_id, u.lsn::pg_lsn, u.idx, now()
FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[]) AS u(sink, event_id, lsn, idx)
ON CONFLICT (pipeline, sink) DO UPDATE
SET event_id = excluded.event_id, commit_lsn = excluded.commit_lsn, idx = excluded.idx, updated_at = now()
WHERE (c.commit_lsn, c.idx) < (excluded.commit_lsn, excluded.idx)`,
		s.pipeline, sinks, ids, lsns, idxs)
	if err != nil {
		return fmt.Errorf("save checkpoints of pipeline %s: %w", s.pipeline, err)
	}
	return nil
}

// Clear deletes every checkpoint of the pipeline: they belonged to a slot
// that is gone, and would skip the new slot's changes
// (lineage.Store.AcceptGap, in the transaction that records the gap).
func (s *Store) Clear(ctx context.Context) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM walcast.checkpoints WHERE pipeline = $1`, s.pipeline); err != nil {
		return fmt.Errorf("delete checkpoints of the old slot of pipeline %s: %w", s.pipeline, err)
	}
	return nil
}
