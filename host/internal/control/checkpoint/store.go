// Package checkpoint keeps walcast's state in the `walcast` schema of the
// source database: each sink's watermark (the last event id such that every
// event at or below it is resolved for that sink) and what the pipeline
// created (so teardown removes only that).
//
// The schema lives in the database being captured because that database
// already exists, is durable and is reachable from every walcast command.
// It is never captured: the publication never names it and the decoder
// drops it. Watermarks are written a few times a second at most, never per
// event, so they add little WAL.
package checkpoint

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/host/internal/control/schema"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Querier is control.Querier, until the stores move to their packages.
type Querier = control.Querier

// Store reads and writes one pipeline's checkpoints.
type Store struct {
	db       Querier
	pipeline string
}

// New returns a store for pipeline. schema.Migrate must have run.
func New(db Querier, pipeline string) *Store {
	return &Store{db: db, pipeline: pipeline}
}

// Pipeline is the name of the pipeline the store belongs to.
func (s *Store) Pipeline() string { return s.pipeline }

// Init is schema.Migrate on the store's Querier, until the stores move.
func (s *Store) Init(ctx context.Context) error { return schema.Migrate(ctx, s.db) }

// Forget is schema.Forget of the store's pipeline, until the stores move.
func (s *Store) Forget(ctx context.Context) error { return schema.Forget(ctx, s.db, s.pipeline) }

// Load returns the stored watermark of every sink of the pipeline.
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

// Save writes the given watermarks in one statement. A watermark never
// moves backwards: a stored one that is higher is kept.
func (s *Store) Save(ctx context.Context, marks map[string]cdc.EventID) error {
	if len(marks) == 0 {
		return nil
	}
	sinks := make([]string, 0, len(marks))
	ids := make([]string, 0, len(marks))
	lsns := make([]string, 0, len(marks))
	idxs := make([]int64, 0, len(marks))
	for sink, id := range marks {
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
	err = s.db.QueryRow(ctx, `
SELECT slot, publication, created_publication, coalesce(system_identifier, ''), coalesce(database_oid, 0),
       coalesce(slot_created_lsn::text, '0/0'), coalesce(confirm_limit::text, '0/0')
FROM walcast.pipelines WHERE pipeline = $1`,
		s.pipeline).Scan(&p.Slot, &p.Publication, &p.CreatedPublication, &p.Identity.SystemIdentifier, &oid, &created, &limit)
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Pipeline{}, false, nil
	case errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000"):
		return Pipeline{}, false, nil
	case err != nil:
		return Pipeline{}, false, fmt.Errorf("load pipeline %s: %w", s.pipeline, err)
	}
	p.Identity.DatabaseOID = uint32(oid)
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
