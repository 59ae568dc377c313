package lineage

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/host/internal/control/checkpoints"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Gap is a recorded, accepted gap.
type Gap struct {
	Sink       string
	From       string // the sink's checkpoint before the gap ("-" when it had none)
	To         uint64 // the new slot's start
	Reason     string
	AcceptedAt time.Time
}

// AcceptGap records, in one transaction, a gap for every sink (from its
// checkpoint to the new slot's start at to), deletes the checkpoints that
// belonged to the old slot, and records the new identity.
func (s *Store) AcceptGap(ctx context.Context, reason string, sinks []string, to uint64, id Identity) error {
	b, ok := s.db.(control.Beginner)
	if !ok {
		return fmt.Errorf("record gap: %T cannot begin a transaction", s.db)
	}
	stored, err := checkpoints.New(s.db, s.pipeline).Load(ctx)
	if err != nil {
		return err
	}
	tx, err := b.Begin(ctx)
	if err != nil {
		return fmt.Errorf("record gap of pipeline %s: %w", s.pipeline, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// Every configured sink, and every sink that has a checkpoint, once.
	var all []string
	for _, sink := range append(slices.Clone(sinks), slices.Collect(maps.Keys(stored))...) {
		if !slices.Contains(all, sink) {
			all = append(all, sink)
		}
	}
	if err := s.insertGaps(ctx, tx, reason, all, stored, to); err != nil {
		return err
	}
	if err := checkpoints.New(tx, s.pipeline).Clear(ctx); err != nil {
		return err
	}
	if err := New(tx, s.pipeline).SetIdentity(ctx, id); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("record gap of pipeline %s: %w", s.pipeline, err)
	}
	return nil
}

// RecordGap records, for each of sinks, a gap from its checkpoint to to,
// without touching the checkpoints: the slot stays, and only some changes
// before to were lost (reason says which).
func (s *Store) RecordGap(ctx context.Context, reason string, sinks []string, to uint64) error {
	stored, err := checkpoints.New(s.db, s.pipeline).Load(ctx)
	if err != nil {
		return err
	}
	return s.insertGaps(ctx, s.db, reason, sinks, stored, to)
}

// insertGaps inserts one gap per sink, from its checkpoint in stored ("-"
// when it has none) to to.
func (s *Store) insertGaps(ctx context.Context, db control.Querier, reason string, sinks []string, stored map[string]cdc.EventID, to uint64) error {
	froms := make([]string, len(sinks))
	for i, sink := range sinks {
		froms[i] = "-"
		if m, ok := stored[sink]; ok {
			froms[i] = m.String()
		}
	}
	_, err := db.Exec(ctx, `INSERT INTO walcast.gaps (pipeline, sink, from_event, to_lsn, reason)
SELECT $1, u.sink, u.from_event, $4::pg_lsn, $5 FROM unnest($2::text[], $3::text[]) AS u(sink, from_event)`,
		s.pipeline, sinks, froms, cdc.FormatLSN(to), reason)
	if err != nil {
		return fmt.Errorf("record gap of pipeline %s: %w", s.pipeline, err)
	}
	return nil
}

// Gaps lists the pipeline's accepted gaps, oldest first; none when the
// walcast schema does not exist.
func (s *Store) Gaps(ctx context.Context) ([]Gap, error) {
	rows, err := s.db.Query(ctx, `SELECT sink, from_event, to_lsn::text, reason, accepted_at FROM walcast.gaps WHERE pipeline = $1 ORDER BY id`, s.pipeline)
	if control.NoSchema(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list gaps of pipeline %s: %w", s.pipeline, err)
	}
	gaps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Gap, error) {
		var g Gap
		var to string
		if err := r.Scan(&g.Sink, &g.From, &to, &g.Reason, &g.AcceptedAt); err != nil {
			return g, err
		}
		g.To, err = cdc.ParseLSN(to)
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("list gaps of pipeline %s: %w", s.pipeline, err)
	}
	return gaps, nil
}
