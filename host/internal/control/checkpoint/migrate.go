package checkpoint

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/pg"
)

// migration is one step of the walcast schema. Steps are applied in order,
// each once, and recorded in walcast.schema_version; their SQL is also
// idempotent, so that a database created by a walcast without versioning
// (which made the version 1 tables ad hoc) upgrades in place.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations is the one ordered list of schema changes. Append only: a
// released step is never edited, a change is a new step.
var migrations = []migration{
	{1, "control plane: pipelines, checkpoints, parked events, replay requests, usage, pauses", ddl + parkedDDL + pauseDDL},
	{2, "cluster identity and slot incarnation of each pipeline", identityDDL},
	{3, "gaps accepted by an operator", gapsDDL},
	{4, "parked key changes under both rows; sinks stopped by a fatal error", parkedOldRowDDL + failureDDL},
	{5, "backfills and the tables each pipeline has listed", backfillDDL},
	{6, "catch-up slots of sinks that fell behind", catchupDDL},
	{7, "each sink's backlog as the leading daemon last reported it", backlogDDL},
	{8, "the furthest position walcast may have confirmed to each pipeline's slot", confirmLimitDDL},
	{9, "how each pipeline's tables were published when walcast last checked", publishedDDL},
	{10, "whether each catch-up slot was copied (and not yet given up at a rejoin)", catchupCopiedDDL},
	{11, "how each pipeline's last leadership term ended: released, or not", leadershipDDL},
	{12, "each replication stream as the leading daemon last reported it (receive timeouts)", streamsDDL},
}

// SchemaVersion is the newest walcast schema this binary knows.
func SchemaVersion() int { return migrations[len(migrations)-1].version }

// migrateLock is the advisory lock key that serialises migrations of one
// database across walcast processes (any constant; "walc" in ASCII).
const migrateLock = 0x77616c63

// ErrSchemaTooNew is wrapped by Migrate's error when the database was
// migrated by a newer walcast.
var ErrSchemaTooNew = errors.New("walcast schema is newer than this walcast")

type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Migrate brings the walcast schema to SchemaVersion, in one transaction
// under an advisory lock, so that two walcast processes starting at once
// apply each step once. It refuses a schema newer than this binary knows:
// an older walcast could misread tables it does not know.
//
// A schema already at SchemaVersion is left alone, without a DDL
// statement: a second role that was granted only the use of the walcast
// tables (docs/operations.md, "Roles and grants") can start, whereas
// CREATE … IF NOT EXISTS needs the right to create even when nothing is
// created. A schema that needs a step is migrated only by a role that may
// create tables in it and owns its tables (or a superuser): another role
// is told which role can, rather than seeing a migration fail on the
// first table it does not own.
func Migrate(ctx context.Context, db Querier) error {
	b, ok := db.(beginner)
	if !ok {
		return fmt.Errorf("migrate walcast schema: %T cannot begin a transaction", db)
	}
	tx, err := b.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate walcast schema: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLock)); err != nil {
		return fmt.Errorf("migrate walcast schema: take lock: %w", err)
	}
	current, owner, err := schemaState(ctx, tx)
	if err != nil {
		return err
	}
	if current > SchemaVersion() {
		return fmt.Errorf("%w: the walcast schema of this database is at version %d, but this walcast knows versions up to %d: a newer walcast has used this database; run that version (or newer) instead",
			ErrSchemaTooNew, current, SchemaVersion())
	}
	if current == SchemaVersion() {
		return tx.Commit(ctx)
	}
	if owner != nil && !owner.mine {
		return &pg.Error{
			Role: owner.me,
			Problem: fmt.Sprintf("the walcast schema of this database is at version %d and this walcast must migrate it to version %d, which only role %s (the owner of its tables) may do, not role %s",
				current, SchemaVersion(), owner.name, owner.me),
			Fix: fmt.Sprintf("start this walcast once as role %s (or a superuser), then grant role %s the new tables again (see \"Roles and grants\" in docs/operations.md)", owner.name, owner.me),
			Err: errors.New("migrate walcast schema: not its owner"),
		}
	}
	if _, err := tx.Exec(ctx, `
CREATE SCHEMA IF NOT EXISTS walcast;
CREATE TABLE IF NOT EXISTS walcast.schema_version (
	version    int PRIMARY KEY,
	name       text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`); err != nil {
		return fmt.Errorf("migrate walcast schema: create version table: %w", err)
	}
	for _, m := range migrations {
		if m.version <= current {
			continue
		}
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return fmt.Errorf("migrate walcast schema to version %d (%s): %w", m.version, m.name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO walcast.schema_version (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
			return fmt.Errorf("migrate walcast schema: record version %d: %w", m.version, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate walcast schema: commit: %w", err)
	}
	return nil
}

// schemaOwner says whether the current role (me) may migrate an existing
// walcast schema: create tables in it and alter each of its tables. name
// is the role that can, when me cannot: the owner of a table me does not
// own, else the schema's owner.
type schemaOwner struct {
	name, me string
	mine     bool
}

// schemaState reads the walcast schema's version (0 when the schema or
// its version table does not exist yet) and, when the schema exists,
// whether this role may migrate it. The catalogs are read first, so that
// a missing schema is not an error that would end the transaction.
func schemaState(ctx context.Context, tx pgx.Tx) (version int, owner *schemaOwner, err error) {
	var exists, versioned bool
	var o schemaOwner
	err = tx.QueryRow(ctx, `
SELECT n.oid IS NOT NULL, current_user::text,
       coalesce((SELECT c.relowner::regrole::text FROM pg_class c
                 WHERE c.relnamespace = n.oid AND c.relkind IN ('r', 'p', 'S') AND NOT pg_has_role(c.relowner, 'USAGE')
                 ORDER BY c.relname LIMIT 1), n.nspowner::regrole::text, ''),
       n.oid IS NOT NULL AND has_schema_privilege(n.oid, 'CREATE')
         AND NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.relnamespace = n.oid AND c.relkind IN ('r', 'p', 'S') AND NOT pg_has_role(c.relowner, 'USAGE')),
       EXISTS (SELECT 1 FROM pg_class c WHERE c.relnamespace = n.oid AND c.relname = 'schema_version')
FROM (SELECT 1) one LEFT JOIN pg_namespace n ON n.nspname = $1`, pg.ControlSchema).Scan(&exists, &o.me, &o.name, &o.mine, &versioned)
	if err != nil {
		return 0, nil, fmt.Errorf("migrate walcast schema: look up schema %s: %w", pg.ControlSchema, err)
	}
	if !exists {
		return 0, nil, nil
	}
	if versioned {
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM walcast.schema_version`).Scan(&version); err != nil {
			return 0, nil, fmt.Errorf("migrate walcast schema: read version: %w", err)
		}
	}
	return version, &o, nil
}

// backfillDDL creates the backfill tables (host/internal/source/backfill).
//
// walcast.backfills: one row per requested backfill. last_key holds the key
// of the last row done as text, in pagination order (null before the first
// chunk). sinks is empty for "every sink".
//
// walcast.backfill_tables: the tables a pipeline has seen in its source
// block, for backfill_new_tables.
const backfillDDL = `
CREATE SCHEMA IF NOT EXISTS walcast;
CREATE TABLE IF NOT EXISTS walcast.backfills (
	id          bigserial PRIMARY KEY,
	pipeline    text NOT NULL,
	schema_name text NOT NULL,
	table_name  text NOT NULL,
	sinks       text[] NOT NULL DEFAULT '{}',
	state       text NOT NULL DEFAULT 'queued',
	reason      text NOT NULL DEFAULT '',
	last_key    text[],
	rows_done   bigint NOT NULL DEFAULT 0,
	chunks_done bigint NOT NULL DEFAULT 0,
	estimate    bigint NOT NULL DEFAULT 0,
	created_at  timestamptz NOT NULL DEFAULT now(),
	started_at  timestamptz,
	updated_at  timestamptz NOT NULL DEFAULT now(),
	finished_at timestamptz
);
CREATE INDEX IF NOT EXISTS backfills_pipeline_state ON walcast.backfills (pipeline, state);
CREATE TABLE IF NOT EXISTS walcast.backfill_tables (
	pipeline   text NOT NULL,
	table_name text NOT NULL,
	PRIMARY KEY (pipeline, table_name)
);
`

// catchupCopiedDDL marks a catch-up slot that exists and holds what its
// sink needs: set once the copy succeeded, cleared before a rejoin drops
// it. A record so marked whose slot is gone was dropped by someone else,
// with changes the pipeline's slot no longer holds. NULL: recorded by a
// walcast that did not mark it.
const catchupCopiedDDL = `
ALTER TABLE walcast.catchup_slots ADD COLUMN IF NOT EXISTS copied boolean;
`

// catchupDDL records the catch-up slot of each detached sink
// (host/internal/delivery/isolate).
const catchupDDL = `
CREATE SCHEMA IF NOT EXISTS walcast;
CREATE TABLE IF NOT EXISTS walcast.catchup_slots (
	pipeline   text NOT NULL,
	sink       text NOT NULL,
	slot       text NOT NULL,
	mode       text NOT NULL DEFAULT 'catching_up',
	since      timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (pipeline, sink)
);
`

// Access is what the current role may do with the walcast schema, read
// from the catalogs only, so that a start can tell every missing
// privilege before it creates anything (capture.Preflight).
type Access struct {
	// Role is the current role; Database the current database.
	Role, Database string
	// Exists: the schema exists. CanCreate: the role may create it (the
	// CREATE privilege on the database), which matters when it does not.
	Exists, CanCreate bool
	// Owner owns the schema ("" when it does not exist).
	Owner string
	// Denied lists the schema's objects the role may not use the way
	// walcast does ("schema walcast", "table walcast.parked", "sequence
	// walcast.gaps_id_seq"), in that order.
	Denied []string
	// Version is the schema's version; 0 when it is not versioned yet or
	// the role may not read it.
	Version int
	// MigrateAs, when set, is the role that may apply the steps the
	// schema needs, which this role may not.
	MigrateAs string
}

// CheckAccess reads Access without changing anything.
func CheckAccess(ctx context.Context, db Querier) (Access, error) {
	var a Access
	err := db.QueryRow(ctx, `
SELECT current_user::text, current_database()::text, has_database_privilege(current_database(), 'CREATE'),
       n.oid IS NOT NULL, coalesce(n.nspowner::regrole::text, '')
FROM (SELECT 1) one LEFT JOIN pg_namespace n ON n.nspname = $1`, pg.ControlSchema).Scan(&a.Role, &a.Database, &a.CanCreate, &a.Exists, &a.Owner)
	if err != nil {
		return a, fmt.Errorf("check access to schema %s: %w", pg.ControlSchema, err)
	}
	if !a.Exists {
		return a, nil
	}
	// Each privilege alone: has_table_privilege with a list is true when
	// any one of them is held.
	rows, err := db.Query(ctx, `
SELECT 'schema ' || n.nspname FROM pg_namespace n WHERE n.nspname = $1 AND NOT has_schema_privilege(n.oid, 'USAGE')
UNION ALL
SELECT * FROM (
  SELECT CASE c.relkind WHEN 'S' THEN 'sequence ' ELSE 'table ' END || n.nspname || '.' || c.relname
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = $1 AND (
    (c.relkind IN ('r', 'p') AND NOT (has_table_privilege(c.oid, 'SELECT') AND has_table_privilege(c.oid, 'INSERT')
                                      AND has_table_privilege(c.oid, 'UPDATE') AND has_table_privilege(c.oid, 'DELETE')))
    OR (c.relkind = 'S' AND NOT has_sequence_privilege(c.oid, 'USAGE')))
  ORDER BY c.relkind DESC, c.relname) objects`, pg.ControlSchema)
	if err != nil {
		return a, fmt.Errorf("check access to schema %s: %w", pg.ControlSchema, err)
	}
	if a.Denied, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return a, fmt.Errorf("check access to schema %s: %w", pg.ControlSchema, err)
	}
	if len(a.Denied) > 0 {
		return a, nil
	}
	b, ok := db.(beginner)
	if !ok {
		return a, nil
	}
	// Read-only, in a transaction that is rolled back: schemaState's
	// reads are Migrate's own.
	tx, err := b.Begin(ctx)
	if err != nil {
		return a, fmt.Errorf("check access to schema %s: %w", pg.ControlSchema, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	version, owner, err := schemaState(ctx, tx)
	if err != nil {
		return a, err
	}
	a.Version = version
	if version < SchemaVersion() && owner != nil && !owner.mine {
		a.MigrateAs = owner.name
	}
	return a, nil
}

// DropUnused drops the walcast schema when none of its tables holds a row
// of another pipeline than this one: a start of pipeline that created the
// schema and then failed removes it. It runs under the migration lock, so
// that it never drops a schema another start is migrating, and reports
// whether it dropped it.
func DropUnused(ctx context.Context, db Querier, pipeline string) (bool, error) {
	b, ok := db.(beginner)
	if !ok {
		return false, fmt.Errorf("drop walcast schema: %T cannot begin a transaction", db)
	}
	tx, err := b.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("drop walcast schema: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLock)); err != nil {
		return false, fmt.Errorf("drop walcast schema: take lock: %w", err)
	}
	rows, err := tx.Query(ctx, `
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'pipeline' AND NOT a.attisdropped
WHERE n.nspname = $1 AND c.relkind = 'r' ORDER BY 1`, pg.ControlSchema)
	if err != nil {
		return false, fmt.Errorf("drop walcast schema: list its tables: %w", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return false, fmt.Errorf("drop walcast schema: list its tables: %w", err)
	}
	for _, t := range tables {
		var used bool
		q := `SELECT EXISTS (SELECT 1 FROM ` + pgx.Identifier{pg.ControlSchema, t}.Sanitize() + ` WHERE pipeline <> $1)`
		if err := tx.QueryRow(ctx, q, pipeline).Scan(&used); err != nil {
			return false, fmt.Errorf("drop walcast schema: read walcast.%s: %w", t, err)
		}
		if used {
			return false, nil
		}
	}
	if _, err := tx.Exec(ctx, `DROP SCHEMA IF EXISTS `+pg.ControlSchema+` CASCADE`); err != nil {
		return false, fmt.Errorf("drop walcast schema: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("drop walcast schema: commit: %w", err)
	}
	return true, nil
}
