package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// identityDDL records where a pipeline's checkpoints belong: the cluster
// (pg_control_system's system_identifier, which a restore, a copy into
// another cluster or pg_upgrade changes), the database, and the
// incarnation of the slot (the position walcast created it at, or adopted
// it at). Checkpoints of another cluster or slot would skip changes that
// were never delivered.
const identityDDL = `
ALTER TABLE walcast.pipelines
	ADD COLUMN IF NOT EXISTS system_identifier text,
	ADD COLUMN IF NOT EXISTS database_oid      bigint,
	ADD COLUMN IF NOT EXISTS slot_created_lsn  pg_lsn,
	ADD COLUMN IF NOT EXISTS slot_created_at   timestamptz;
`

// gapsDDL holds the gaps an operator accepted (walcast run --accept-gap):
// per sink, the last checkpoint before the gap and the new slot's start.
// Changes committed between the two were not delivered.
const gapsDDL = `
CREATE TABLE IF NOT EXISTS walcast.gaps (
	id          bigserial PRIMARY KEY,
	pipeline    text NOT NULL,
	sink        text NOT NULL,
	from_event  text NOT NULL,
	to_lsn      pg_lsn NOT NULL,
	reason      text NOT NULL,
	accepted_at timestamptz NOT NULL DEFAULT now()
);
`

// Identity is the cluster and database a pipeline's checkpoints were made
// on, and the incarnation of its slot.
type Identity struct {
	SystemIdentifier string
	DatabaseOID      uint32
	// SlotCreatedLSN is where the slot walcast streams from was created
	// (or adopted, for a slot older than this record); zero when unknown.
	SlotCreatedLSN uint64
}

// Gap is a recorded, accepted gap.
type Gap struct {
	Sink       string
	From       string // the sink's checkpoint before the gap ("-" when it had none)
	To         uint64 // the new slot's start
	Reason     string
	AcceptedAt time.Time
}

// SetIdentity records the cluster, database and slot incarnation the
// pipeline's checkpoints belong to.
func (s *Store) SetIdentity(ctx context.Context, id Identity) error {
	_, err := s.db.Exec(ctx, `
UPDATE walcast.pipelines
SET system_identifier = $2, database_oid = $3, slot_created_lsn = $4::pg_lsn, slot_created_at = now()
WHERE pipeline = $1`, s.pipeline, id.SystemIdentifier, int64(id.DatabaseOID), cdc.FormatLSN(id.SlotCreatedLSN))
	if err != nil {
		return fmt.Errorf("record cluster identity of pipeline %s: %w", s.pipeline, err)
	}
	return nil
}

// ForgetSlot clears the slot incarnation, after walcast dropped a slot it
// had just created in a start that failed: nothing was streamed from it.
func (s *Store) ForgetSlot(ctx context.Context) error {
	_, err := s.db.Exec(ctx, `UPDATE walcast.pipelines SET slot_created_lsn = NULL, slot_created_at = NULL, confirm_limit = NULL WHERE pipeline = $1`, s.pipeline)
	if err != nil {
		return fmt.Errorf("forget slot of pipeline %s: %w", s.pipeline, err)
	}
	return nil
}

// AcceptGap records, in one transaction, a gap for every sink (from its
// checkpoint to the new slot's start at to), deletes the checkpoints that
// belonged to the old slot, and records the new identity.
func (s *Store) AcceptGap(ctx context.Context, reason string, sinks []string, to uint64, id Identity) error {
	b, ok := s.db.(control.Beginner)
	if !ok {
		return fmt.Errorf("record gap: %T cannot begin a transaction", s.db)
	}
	marks, err := s.Load(ctx)
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
	for _, sink := range append(slices.Clone(sinks), slices.Collect(maps.Keys(marks))...) {
		if !slices.Contains(all, sink) {
			all = append(all, sink)
		}
	}
	if err := s.insertGaps(ctx, tx, reason, all, marks, to); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM walcast.checkpoints WHERE pipeline = $1`, s.pipeline); err != nil {
		return fmt.Errorf("delete checkpoints of the old slot of pipeline %s: %w", s.pipeline, err)
	}
	if _, err := tx.Exec(ctx, `
UPDATE walcast.pipelines
SET system_identifier = $2, database_oid = $3, slot_created_lsn = $4::pg_lsn, slot_created_at = now()
WHERE pipeline = $1`, s.pipeline, id.SystemIdentifier, int64(id.DatabaseOID), cdc.FormatLSN(id.SlotCreatedLSN)); err != nil {
		return fmt.Errorf("record cluster identity of pipeline %s: %w", s.pipeline, err)
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
	marks, err := s.Load(ctx)
	if err != nil {
		return err
	}
	return s.insertGaps(ctx, s.db, reason, sinks, marks, to)
}

// insertGaps inserts one gap per sink, from its checkpoint in marks ("-"
// when it has none) to to.
func (s *Store) insertGaps(ctx context.Context, db Querier, reason string, sinks []string, marks map[string]cdc.EventID, to uint64) error {
	froms := make([]string, len(sinks))
	for i, sink := range sinks {
		froms[i] = "-"
		if m, ok := marks[sink]; ok {
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
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") {
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
