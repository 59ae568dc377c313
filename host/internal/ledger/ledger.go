package ledger

import (
	"context"

	"github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/host/internal/control/checkpoints"
	"github.com/walcast/walcast/host/internal/control/leader"
	"github.com/walcast/walcast/host/internal/control/lineage"
	"github.com/walcast/walcast/host/internal/control/schema"
	"github.com/walcast/walcast/host/internal/source/capture"
	"github.com/walcast/walcast/host/internal/source/decode"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Store is capture.Ledger for one pipeline.
type Store struct {
	db          control.Querier
	pipeline    string
	records     *lineage.Store
	checkpoints *checkpoints.Store
}

var (
	_ capture.Ledger     = (*Store)(nil)
	_ capture.ShapeStore = (*Store)(nil)
)

// New returns the ledger of pipeline on db. Writes go where db sends
// them: a fenced db fences them.
func New(db control.Querier, pipeline string) *Store {
	return &Store{db: db, pipeline: pipeline, records: lineage.New(db, pipeline), checkpoints: checkpoints.New(db, pipeline)}
}

// Access implements capture.Schema.
func (s *Store) Access(ctx context.Context) (capture.SchemaAccess, error) {
	a, err := schema.CheckAccess(ctx, s.db)
	return capture.SchemaAccess{
		Role: a.Role, Database: a.Database, Exists: a.Exists, CanCreate: a.CanCreate, Owner: a.Owner,
		Denied: a.Denied, Version: a.Version, Latest: schema.Version(), MigrateAs: a.MigrateAs,
	}, err
}

// Migrate implements capture.Schema.
func (s *Store) Migrate(ctx context.Context) error { return schema.Migrate(ctx, s.db) }

// OthersLead implements capture.Schema: another pipeline's leadership
// lock is held in this database. The error is the query's own: the caller
// says what it was looking for.
func (s *Store) OthersLead(ctx context.Context) (bool, error) {
	class, obj := leader.Keys(s.pipeline)
	var others bool
	err := s.db.QueryRow(ctx, `
SELECT EXISTS (SELECT 1 FROM pg_locks
               WHERE locktype = 'advisory' AND granted AND classid::bigint = $1 AND objid::bigint <> $2
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`,
		int64(uint32(class)), int64(uint32(obj))).Scan(&others)
	return others, err
}

// DropUnused implements capture.Schema.
func (s *Store) DropUnused(ctx context.Context) (bool, error) {
	return schema.DropUnused(ctx, s.db, s.pipeline)
}

// LoadRecord implements capture.Records.
func (s *Store) LoadRecord(ctx context.Context) (capture.Record, bool, error) {
	p, ok, err := s.records.LoadPipeline(ctx)
	return capture.Record{
		Slot: p.Slot, Publication: p.Publication, CreatedPublication: p.CreatedPublication,
		Identity: capture.Identity(p.Identity), ConfirmLimit: p.ConfirmLimit,
	}, ok, err
}

// SaveRecord implements capture.Records.
func (s *Store) SaveRecord(ctx context.Context, rec capture.Record) error {
	return s.records.RecordPipeline(ctx, lineage.Pipeline{Slot: rec.Slot, Publication: rec.Publication, CreatedPublication: rec.CreatedPublication})
}

// SetConfirmLimit implements capture.Records.
func (s *Store) SetConfirmLimit(ctx context.Context, lsn uint64) error {
	return s.records.SetConfirmLimit(ctx, lsn)
}

// SetIdentity implements capture.Records.
func (s *Store) SetIdentity(ctx context.Context, id capture.Identity) error {
	return s.records.SetIdentity(ctx, lineage.Identity(id))
}

// AcceptGap implements capture.Records.
func (s *Store) AcceptGap(ctx context.Context, reason string, sinks []string, to uint64, id capture.Identity) error {
	return s.records.AcceptGap(ctx, reason, sinks, to, lineage.Identity(id))
}

// RecordGap implements capture.Records.
func (s *Store) RecordGap(ctx context.Context, reason string, sinks []string, to uint64) error {
	return s.records.RecordGap(ctx, reason, sinks, to)
}

// Published implements capture.Records.
func (s *Store) Published(ctx context.Context) (map[string]string, error) {
	return s.records.Published(ctx)
}

// RecordPublished implements capture.Records.
func (s *Store) RecordPublished(ctx context.Context, published map[string]string) error {
	return s.records.RecordPublished(ctx, published)
}

// LoadShapes implements capture.ShapeStore.
func (s *Store) LoadShapes(ctx context.Context) ([]decode.ShapeRecord, error) {
	shapes, err := s.records.Shapes(ctx)
	out := make([]decode.ShapeRecord, len(shapes))
	for i, sh := range shapes {
		out[i] = decode.ShapeRecord{RelationID: sh.RelationID, At: sh.At, Shape: sh.Shape}
	}
	return out, err
}

// RecordShape implements capture.ShapeStore.
func (s *Store) RecordShape(ctx context.Context, rec decode.ShapeRecord) error {
	return s.records.RecordShape(ctx, lineage.Shape{RelationID: rec.RelationID, At: rec.At, Shape: rec.Shape})
}

// Checkpoints implements capture.Records.
func (s *Store) Checkpoints(ctx context.Context) (map[string]cdc.EventID, error) {
	return s.checkpoints.Load(ctx)
}

// ForgetSetup implements capture.Records.
func (s *Store) ForgetSetup(ctx context.Context) error { return s.records.ForgetSetup(ctx) }

// ForgetSlot implements capture.Records.
func (s *Store) ForgetSlot(ctx context.Context) error { return s.records.ForgetSlot(ctx) }

// Forget implements capture.Records.
func (s *Store) Forget(ctx context.Context) error { return schema.Forget(ctx, s.db, s.pipeline) }
