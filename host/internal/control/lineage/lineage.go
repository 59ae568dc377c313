package lineage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Store reads and writes one pipeline's lineage.
type Store struct {
	db       control.Querier
	pipeline string
}

// New returns the lineage of pipeline, read and written on db.
func New(db control.Querier, pipeline string) *Store {
	return &Store{db: db, pipeline: pipeline}
}

// Pipeline is what walcast recorded about a pipeline it set up.
type Pipeline struct {
	Slot               string
	Publication        string
	CreatedPublication bool
	// Identity is where the checkpoints belong; its fields are zero when
	// not recorded yet (a pipeline set up by an older walcast).
	Identity Identity
	// ConfirmLimit is the furthest position walcast may have confirmed to
	// the slot (see SetConfirmLimit); 0 when unknown.
	ConfirmLimit uint64
	// SlotRecordedAt is when Identity was last recorded (SetIdentity):
	// when walcast created, adopted or replaced the slot.
	SlotRecordedAt time.Time
}

// Epoch names the series the ids streamed from the pipeline's slot
// belong to (pluginkit.Batch.Epoch), empty when no identity is recorded.
// It changes with every slot incarnation walcast records (a gap accepted,
// a failover, a restored database), and only then: ids of one epoch are
// ordered as the slot's WAL is, while the ids of a new slot after a
// failover or a restore can be lower than ids of the old one. The cluster
// and the slot's start alone could repeat (a standby promoted at the very
// position the old slot was created at, a restored copy), so the time
// the incarnation was recorded, to the microsecond, is part of it.
func (p Pipeline) Epoch() string {
	if p.Identity.SystemIdentifier == "" || p.SlotRecordedAt.IsZero() {
		return ""
	}
	return fmt.Sprintf("%s:%s@%d", p.Identity.SystemIdentifier, cdc.FormatLSN(p.Identity.SlotCreatedLSN), p.SlotRecordedAt.UnixMicro())
}

// RecordPipeline stores the slot and publication names, and whether
// walcast created the publication (teardown drops only what it created).
// An existing record keeps created_publication true once set.
func (s *Store) RecordPipeline(ctx context.Context, p Pipeline) error {
	_, err := s.db.Exec(ctx, `
INSERT INTO walcast.pipelines (pipeline, slot, publication, created_publication)
VALUES ($1, $2, $3, $4)
ON CONFLICT (pipeline) DO UPDATE
SET slot = excluded.slot, publication = excluded.publication,
    created_publication = walcast.pipelines.created_publication OR excluded.created_publication`,
		s.pipeline, p.Slot, p.Publication, p.CreatedPublication)
	if err != nil {
		return fmt.Errorf("record pipeline %s: %w", s.pipeline, err)
	}
	return nil
}

// LoadPipeline returns the recorded pipeline, or ok=false when none exists
// (including when the walcast schema itself does not exist yet).
func (s *Store) LoadPipeline(ctx context.Context) (p Pipeline, ok bool, err error) {
	var oid int64
	var created, limit string
	var recorded *time.Time
	err = s.db.QueryRow(ctx, `
SELECT slot, publication, created_publication, coalesce(system_identifier, ''), coalesce(database_oid, 0),
       coalesce(slot_created_lsn::text, '0/0'), coalesce(confirm_limit::text, '0/0'), slot_created_at
FROM walcast.pipelines WHERE pipeline = $1`,
		s.pipeline).Scan(&p.Slot, &p.Publication, &p.CreatedPublication, &p.Identity.SystemIdentifier, &oid, &created, &limit, &recorded)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Pipeline{}, false, nil
	case control.NoSchema(err):
		return Pipeline{}, false, nil
	case err != nil:
		return Pipeline{}, false, fmt.Errorf("load pipeline %s: %w", s.pipeline, err)
	}
	p.Identity.DatabaseOID = uint32(oid)
	if recorded != nil {
		p.SlotRecordedAt = *recorded
	}
	if p.Identity.SlotCreatedLSN, err = cdc.ParseLSN(created); err != nil {
		return Pipeline{}, false, fmt.Errorf("load pipeline %s: slot position: %w", s.pipeline, err)
	}
	if p.ConfirmLimit, err = cdc.ParseLSN(limit); err != nil {
		return Pipeline{}, false, fmt.Errorf("load pipeline %s: confirm limit: %w", s.pipeline, err)
	}
	return p, true, nil
}

// ForgetSetup deletes what a start records about a pipeline before it
// streams (its record and how its tables were published), after walcast
// removed what that start created: the start failed, and the pipeline had
// no record before it.
func (s *Store) ForgetSetup(ctx context.Context) error {
	for _, table := range []string{"published_tables", "pipelines"} {
		if _, err := s.db.Exec(ctx, `DELETE FROM walcast.`+table+` WHERE pipeline = $1`, s.pipeline); err != nil {
			return fmt.Errorf("delete walcast.%s rows of pipeline %s: %w", table, s.pipeline, err)
		}
	}
	return nil
}
