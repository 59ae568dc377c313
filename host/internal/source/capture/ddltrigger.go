package capture

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/source/decode"
)

// DDLTrigger names the event trigger that source ddl_events installs for
// a pipeline; its function is walcast.<same name>(), so dropping the
// walcast schema drops both.
func DDLTrigger(pipeline string) string { return "walcast_ddl_" + pipeline }

// ddlFunction is the body of the event trigger's function: at the end of
// each DDL command, for each ordinary or partitioned table it touched, a
// transactional logical decoding message (decode.DDLPrefix) with the
// table's shape as pgoutput will describe it (columns, types and
// modifiers, replica identity and which columns are in it), the command
// tag and the statement. It runs inside the DDL's transaction, so the
// message commits, or not, with the command; as its owner (a superuser),
// so that any role's DDL can write the message; and it never fails the
// command.
//
// Then, for partitioned tables, walcast.partitions_detached (see the
// walcast schema's partitions migration): the keys of the rows of each
// partition the command detached from a captured table, as deletes at
// the command's position; it fails no command either.
const ddlFunction = `
DECLARE
	r record;
BEGIN
	BEGIN
		PERFORM walcast.partitions_detached(%[2]s);
	EXCEPTION WHEN OTHERS THEN
		-- The watch loop finds the partition gone and resyncs the table.
		RAISE WARNING 'walcast ddl_events: %% (the rows of a partition detached reach the sinks through a resync of the table)', SQLERRM;
	END;
	FOR r IN SELECT DISTINCT c.objid FROM pg_event_trigger_ddl_commands() c
	         WHERE c.classid = 'pg_class'::regclass AND c.object_type IN ('table', 'table column') LOOP
		PERFORM pg_logical_emit_message(true, %[1]s, json_build_object(
			'pipeline', %[2]s, 'relation_id', cl.oid::int8, 'schema', n.nspname, 'table', cl.relname,
			'command_tag', tg_tag, 'statement', current_query(), 'replica_identity', cl.relreplident,
			'columns', (SELECT coalesce(json_agg(json_build_object(
					'name', a.attname,
					'type', CASE WHEN a.atttypid >= 10000 THEN tn.nspname || '.' || t.typname ELSE '' END,
					'type_oid', a.atttypid::int8, 'type_modifier', a.atttypmod,
					'key', CASE cl.relreplident
						WHEN 'f' THEN true
						WHEN 'n' THEN false
						WHEN 'i' THEN a.attnum = ANY (coalesce((SELECT i.indkey::int2[] FROM pg_index i WHERE i.indrelid = cl.oid AND i.indisreplident), '{}'))
						ELSE a.attnum = ANY (coalesce((SELECT i.indkey::int2[] FROM pg_index i WHERE i.indrelid = cl.oid AND i.indisprimary), '{}'))
					END) ORDER BY a.attnum), '[]'::json)
				FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid JOIN pg_namespace tn ON tn.oid = t.typnamespace
				WHERE a.attrelid = cl.oid AND a.attnum > 0 AND NOT a.attisdropped)
		)::text)
		FROM pg_class cl JOIN pg_namespace n ON n.oid = cl.relnamespace
		WHERE cl.oid = r.objid AND cl.relkind IN ('r', 'p') AND n.nspname <> 'walcast';
	END LOOP;
EXCEPTION WHEN OTHERS THEN
	-- Never fail the user's command: the schema event then comes with
	-- the table's next row change.
	RAISE WARNING 'walcast ddl_events: %% (the schema event comes with the next row change)', SQLERRM;
END`

// ensureDDLTrigger installs the pipeline's event trigger unless it
// exists. Creating an event trigger needs a superuser in PostgreSQL 15:
// a start by another role finds it installed, or says what to do.
func ensureDDLTrigger(ctx context.Context, db Querier, pipeline string) (created bool, err error) {
	name := DDLTrigger(pipeline)
	var exists, super bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = $1),
		(SELECT rolsuper FROM pg_roles WHERE rolname = current_user)`, name).Scan(&exists, &super); err != nil {
		return false, fmt.Errorf("look up event trigger %s (ddl_events): %w", name, err)
	}
	if exists && !super {
		return false, nil
	}
	if !super {
		return false, fmt.Errorf("ddl_events = true: walcast writes DDL into the stream with an event trigger, and creating one needs a superuser in PostgreSQL (the connecting role is not one): start the pipeline once with a superuser's dsn to install event trigger %s, or set ddl_events = false (schema events then come with the table's next row change)", name)
	}
	ident := pgx.Identifier{name}.Sanitize()
	fn := pgx.Identifier{"walcast", name}.Sanitize()
	body := fmt.Sprintf(ddlFunction, literal(decode.DDLPrefix), literal(pipeline))
	// A superuser's start brings an installed trigger's function up to
	// this version's (a partitions_detached call was added after the
	// first).
	sqls := []string{`CREATE OR REPLACE FUNCTION ` + fn + `() RETURNS event_trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS ` + dollarQuote(body)}
	if !exists {
		sqls = append(sqls, `CREATE EVENT TRIGGER `+ident+` ON ddl_command_end EXECUTE FUNCTION `+fn+`()`)
	}
	for _, sql := range sqls {
		if _, err := db.Exec(ctx, sql); err != nil {
			return false, fmt.Errorf("install event trigger %s (ddl_events): %w", name, err)
		}
	}
	return !exists, nil
}

// ddlTriggerFindings: with ddl_events, a start by a role that is not a
// superuser needs the event trigger installed already.
func ddlTriggerFindings(ctx context.Context, db Querier, cfg Config, role string) ([]Finding, error) {
	if !cfg.DDLEvents {
		return nil, nil
	}
	name := DDLTrigger(cfg.Pipeline)
	var exists, super bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = $1),
		(SELECT rolsuper FROM pg_roles WHERE rolname = current_user)`, name).Scan(&exists, &super); err != nil {
		return nil, fmt.Errorf("look up event trigger %s (ddl_events): %w", name, err)
	}
	if exists || super {
		return nil, nil
	}
	return []Finding{{Object: "event trigger " + name,
		Problem: fmt.Sprintf("ddl_events = true needs event trigger %s, which only a superuser may create, and role %s is not one", name, role),
		Fix:     "start the pipeline once with a superuser's dsn, which installs it, or set ddl_events = false"}}, nil
}

// DropDDLTrigger removes the pipeline's event trigger and its function,
// if there.
func DropDDLTrigger(ctx context.Context, db Querier, pipeline string) error {
	name := DDLTrigger(pipeline)
	if _, err := db.Exec(ctx, `DROP EVENT TRIGGER IF EXISTS `+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("drop event trigger %s: %w", name, err)
	}
	if _, err := db.Exec(ctx, `DROP FUNCTION IF EXISTS `+pgx.Identifier{"walcast", name}.Sanitize()+`()`); err != nil && !strings.Contains(err.Error(), "schema \"walcast\" does not exist") {
		return fmt.Errorf("drop function walcast.%s: %w", name, err)
	}
	return nil
}

// literal quotes s as an SQL string literal.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// dollarQuote quotes a function body with a tag it cannot contain.
func dollarQuote(body string) string {
	tag := "$walcast$"
	for strings.Contains(body, tag) {
		tag = "$w" + tag[1:]
	}
	return tag + body + tag
}
