package schema

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/control"
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
	{13, "resyncs: backfills bracketed by resync_begin and resync_end markers", resyncDDL},
	{14, "the shape of each captured table at each change of it (schema events)", shapesDDL},
	{15, "the partitions of each captured partitioned table as walcast last saw them; backfills of one partition", partitionsDDL},
	{16, "partition functions: the rows of a partition of a table without a primary key are written or left on the record, never dropped unsaid", partitionsKeylessDDL},
}

// Version is the newest walcast schema this binary knows.
func Version() int { return migrations[len(migrations)-1].version }

// migrateLock is the advisory lock key that serialises migrations of one
// database across walcast processes (any constant; "walc" in ASCII).
const migrateLock = 0x77616c63

// ErrTooNew is wrapped by Migrate's error when the database was
// migrated by a newer walcast.
var ErrTooNew = errors.New("walcast schema is newer than this walcast")

// Migrate brings the walcast schema to Version, in one transaction
// under an advisory lock, so that two walcast processes starting at once
// apply each step once. It refuses a schema newer than this binary knows:
// an older walcast could misread tables it does not know.
//
// A schema already at Version is left alone, without a DDL
// statement: a second role that was granted only the use of the walcast
// tables (docs/operations.md, "Roles and grants") can start, whereas
// CREATE … IF NOT EXISTS needs the right to create even when nothing is
// created. A schema that needs a step is migrated only by a role that may
// create tables in it and owns its tables (or a superuser): another role
// is told which role can, rather than seeing a migration fail on the
// first table it does not own.
func Migrate(ctx context.Context, db control.Querier) error {
	b, ok := db.(control.Beginner)
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
	if current > Version() {
		return fmt.Errorf("%w: the walcast schema of this database is at version %d, but this walcast knows versions up to %d: a newer walcast has used this database; run that version (or newer) instead",
			ErrTooNew, current, Version())
	}
	if current == Version() {
		return tx.Commit(ctx)
	}
	if owner != nil && !owner.mine {
		return &pg.Error{
			Role: owner.me,
			Problem: fmt.Sprintf("the walcast schema of this database is at version %d and this walcast must migrate it to version %d, which only role %s (the owner of its tables) may do, not role %s",
				current, Version(), owner.name, owner.me),
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
