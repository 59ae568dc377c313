package schema

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/host/internal/pg"
)

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
func CheckAccess(ctx context.Context, db control.Querier) (Access, error) {
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
	b, ok := db.(control.Beginner)
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
	if version < Version() && owner != nil && !owner.mine {
		a.MigrateAs = owner.name
	}
	return a, nil
}
