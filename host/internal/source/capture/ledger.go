package capture

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walcast/walcast/pluginkit/cdc"
)

// Querier is the part of pgx capture needs (*pgxpool.Pool, *pgx.Conn).
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Ledger is the control plane as a start of the pipeline uses it: walcast's
// schema in the source database, and what that schema keeps about the
// pipeline's source. Capture declares it and its callers give it (built on
// the control plane's stores), so that the source side never imports the
// control plane. Every method may block on the database for as long as ctx
// allows; ctx is the caller's for that one call.
type Ledger interface {
	Schema
	Records
}

// Schema is walcast's schema in the source database, as a start checks it
// before creating anything and removes it when that start created it and
// failed.
type Schema interface {
	// Access reads what the connecting role may do with the schema,
	// changing nothing.
	Access(ctx context.Context) (SchemaAccess, error)
	// Migrate creates the schema or brings it up to date.
	Migrate(ctx context.Context) error
	// OthersLead reports whether another pipeline holds its leadership in
	// this database: its start may be racing this one.
	OthersLead(ctx context.Context) (bool, error)
	// DropUnused drops the schema unless another pipeline has rows in it,
	// and reports whether it did.
	DropUnused(ctx context.Context) (bool, error)
}

// Records is what the walcast schema keeps about the pipeline's source:
// its record (slot, publication, identity, confirm limit), the gaps an
// operator accepted, how the publications published each table, and the
// sinks' checkpoints. All of it belongs to the one pipeline the Records
// were made for.
type Records interface {
	// LoadRecord returns the pipeline's record; ok is false when there is
	// none (the walcast schema missing included).
	LoadRecord(ctx context.Context) (rec Record, ok bool, err error)
	// SaveRecord stores rec's Slot, Publication and CreatedPublication;
	// CreatedPublication, once true, stays true.
	SaveRecord(ctx context.Context, rec Record) error
	// SetConfirmLimit records the furthest position walcast may confirm
	// to the slot (0: none yet).
	SetConfirmLimit(ctx context.Context, lsn uint64) error
	// SetIdentity records where the checkpoints belong.
	SetIdentity(ctx context.Context, id Identity) error
	// AcceptGap records, at once, a gap for every sink (its checkpoint to
	// the new slot's start at to), deletes the old slot's checkpoints and
	// records the new identity.
	AcceptGap(ctx context.Context, reason string, sinks []string, to uint64, id Identity) error
	// RecordGap records for each of sinks a gap from its checkpoint to
	// to, keeping the checkpoints (the slot stays).
	RecordGap(ctx context.Context, reason string, sinks []string, to uint64) error
	// Published returns how each table was published when last recorded
	// (see membership); RecordPublished replaces it.
	Published(ctx context.Context) (map[string]string, error)
	RecordPublished(ctx context.Context, published map[string]string) error
	// Checkpoints returns each sink's checkpoint.
	Checkpoints(ctx context.Context) (map[string]cdc.EventID, error)
	// ForgetSetup deletes what a start records before it streams (the
	// record and the published tables); ForgetSlot clears the slot's
	// incarnation and confirm limit; Forget deletes everything kept
	// about the pipeline.
	ForgetSetup(ctx context.Context) error
	ForgetSlot(ctx context.Context) error
	Forget(ctx context.Context) error
}

// Record is what walcast keeps about a pipeline it set up on its source.
type Record struct {
	Slot               string
	Publication        string
	CreatedPublication bool
	// Identity is where the checkpoints belong; its fields are zero when
	// not recorded yet (a pipeline set up by an older walcast).
	Identity Identity
	// ConfirmLimit is the furthest position walcast may have confirmed to
	// the slot (SetConfirmLimit, Config.Confirm); 0 when unknown.
	ConfirmLimit uint64
}

// Identity is the cluster and database a pipeline's checkpoints were made
// on, and the incarnation of its slot: checkpoints of another cluster or
// slot would skip changes that were never delivered.
type Identity struct {
	// SystemIdentifier is pg_control_system's, which a restore, a copy
	// into another cluster or pg_upgrade changes.
	SystemIdentifier string
	DatabaseOID      uint32
	// SlotCreatedLSN is where the slot walcast streams from was created
	// (or adopted, for a slot older than the record); zero when unknown.
	SlotCreatedLSN uint64
}

// SchemaAccess is what the connecting role may do with the walcast
// schema, read from the catalogs only, so that Preflight can name every
// missing privilege before a start creates anything.
type SchemaAccess struct {
	// Role is the current role; Database the current database.
	Role, Database string
	// Exists: the schema exists. CanCreate: the role may create it (the
	// CREATE privilege on the database), which matters when it does not.
	Exists, CanCreate bool
	// Owner owns the schema ("" when it does not exist).
	Owner string
	// Denied lists the schema's objects the role may not use the way
	// walcast does ("schema walcast", "table walcast.parked", …).
	Denied []string
	// Version is the schema's version (0 when not versioned yet or not
	// readable); Latest is the version this walcast migrates it to.
	Version, Latest int
	// MigrateAs, when set, is the role that may apply the steps the
	// schema needs, which this role may not.
	MigrateAs string
}
