package capture

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walcast/walcast/host/internal/pg"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Finding is one reason the source database is not ready for a pipeline,
// found without changing anything: what is wrong with which object, and
// what fixes it.
type Finding struct {
	// Object is what the finding is about: "setting wal_level", "role
	// app", "database shop", "schema walcast", "table public.orders",
	// "publication walcast_shop", "replication slot walcast_shop".
	Object string
	// Problem says what is wrong, naming the role and the object; Fix is
	// the statement or setting that fixes it.
	Problem, Fix string
}

func (f Finding) String() string { return f.Problem + ": " + f.Fix }

// NotReadyError is a start's refusal before it created anything: every
// finding of Preflight.
type NotReadyError struct {
	Findings []Finding
}

func (e *NotReadyError) Error() string {
	parts := make([]string, len(e.Findings))
	for i, f := range e.Findings {
		parts[i] = f.String()
	}
	return "the source database is not ready for this pipeline (nothing was created): " + strings.Join(parts, "; ")
}

// Preflight checks, without creating or changing anything, what a start
// of the pipeline needs of the source: wal_level, the role's REPLICATION
// attribute (by opening a replication connection, which also checks
// pg_hba.conf), the right to create the walcast schema or to use the one
// another role created, the captured tables (they exist, have a key, and
// are owned by the role when walcast adds them to its publication), a
// publication walcast did not create, and the slot. It returns every
// finding (none: a start would get past these checks); an error means
// the checks themselves could not run.
//
// l is only read: the schema's access, and the pipeline's record when the
// role may read it.
func Preflight(ctx context.Context, db Querier, l Ledger, cfg Config) ([]Finding, error) {
	var out []Finding
	var level string
	if err := db.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return nil, fmt.Errorf("read wal_level: %w", err)
	}
	if level != "logical" {
		out = append(out, Finding{Object: "setting wal_level",
			Problem: fmt.Sprintf("wal_level is %q but logical decoding needs \"logical\"", level),
			Fix:     "run ALTER SYSTEM SET wal_level = logical (or set it in postgresql.conf) and restart PostgreSQL"})
	}
	access, err := l.Access(ctx)
	if err != nil {
		return nil, err
	}
	f, err := checkReplication(ctx, cfg.DSN, access.Role)
	if err != nil {
		return nil, err
	}
	out = append(out, f...)
	out = append(out, accessFindings(access)...)
	tables, f, err := inspectTables(ctx, db, cfg)
	if err != nil {
		return nil, err
	}
	out = append(out, f...)
	if f, err = publicationFindings(ctx, db, l, cfg, access, tables); err != nil {
		return nil, err
	}
	out = append(out, f...)
	if f, err = slotFindings(ctx, db, cfg.Slot); err != nil {
		return nil, err
	}
	out = append(out, f...)
	if f, err = ddlTriggerFindings(ctx, db, cfg, access.Role); err != nil {
		return nil, err
	}
	return append(out, f...), nil
}

// checkReplication opens a replication connection the way capture does:
// a role without REPLICATION, or a pg_hba.conf without a line for it, is
// refused there, and would otherwise be found only after the slot and
// publication were created.
func checkReplication(ctx context.Context, dsn, role string) ([]Finding, error) {
	_, err := identifySystem(ctx, dsn)
	if err == nil {
		return nil, nil
	}
	if !pg.Permanent(err) {
		return nil, fmt.Errorf("open a replication connection to check the role: %w", err)
	}
	var e *pg.Error
	if !errors.As(pg.Explain(err, role), &e) {
		return nil, fmt.Errorf("open a replication connection to check the role: %w", err)
	}
	return []Finding{{Object: "role " + role, Problem: e.Problem + " (a replication connection was refused)", Fix: e.Fix}}, nil
}

// accessFindings says what the role lacks to create the walcast schema or
// use the one another role created.
func accessFindings(a SchemaAccess) []Finding {
	switch {
	case !a.Exists && !a.CanCreate:
		return []Finding{{Object: "database " + a.Database,
			Problem: fmt.Sprintf("role %s may not create schema %s (walcast's state) in database %s", a.Role, pg.ControlSchema, a.Database),
			Fix:     fmt.Sprintf("run GRANT CREATE ON DATABASE %s TO %s, or create the schema for it: CREATE SCHEMA %s AUTHORIZATION %s", pg.Ident(a.Database), pg.Ident(a.Role), pg.ControlSchema, pg.Ident(a.Role))}}
	case len(a.Denied) > 0:
		return []Finding{{Object: "schema " + pg.ControlSchema,
			Problem: fmt.Sprintf("role %s may not use schema %s, which role %s created (no privilege on %s)", a.Role, pg.ControlSchema, a.Owner, strings.Join(a.Denied, ", ")),
			Fix:     pg.GrantsOnControlSchema(pg.Ident(a.Role))}}
	case a.MigrateAs != "":
		return []Finding{{Object: "schema " + pg.ControlSchema,
			Problem: fmt.Sprintf("the walcast schema is at version %d and this walcast must migrate it to version %d, which only role %s (the owner of its tables) may do, not role %s", a.Version, a.Latest, a.MigrateAs, a.Role),
			Fix:     fmt.Sprintf("start this walcast once as role %s (or a superuser), then grant role %s the new tables again (see \"Roles and grants\" in docs/operations.md)", a.MigrateAs, a.Role)}}
	}
	return nil
}

// tableInfo is what Preflight learns of one configured table.
type tableInfo struct {
	name        string // schema.table
	partitioned bool
	keyless     bool
	owner       string
	owned       bool // the current role owns it (or is a member of its owner)
}

// inspectTables looks up every configured table: it must exist, lie
// outside the walcast schema and have a key (unless AllowKeyless).
func inspectTables(ctx context.Context, db Querier, cfg Config) ([]tableInfo, []Finding, error) {
	var out []tableInfo
	var findings []Finding
	for _, t := range cfg.Tables {
		schema, name, _ := strings.Cut(canonical(t), ".")
		if schema == pg.ControlSchema {
			findings = append(findings, Finding{Object: "table " + t,
				Problem: "table " + t + " is in the walcast schema, which is never captured", Fix: "remove it from the source tables"})
			continue
		}
		ti := tableInfo{name: schema + "." + name}
		var ident string
		var hasPK bool
		err := db.QueryRow(ctx, `
SELECT c.relreplident::text, c.relkind = 'p', c.relowner::regrole::text, pg_has_role(c.relowner, 'USAGE'),
       EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`, schema, name).Scan(&ident, &ti.partitioned, &ti.owner, &ti.owned, &hasPK)
		if errors.Is(err, pgx.ErrNoRows) {
			findings = append(findings, Finding{Object: "table " + t,
				Problem: "table " + t + " does not exist in the source database", Fix: "create it or remove it from the source tables"})
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("inspect table %s: %w", t, err)
		}
		ti.keyless = ident == "n" || (ident == "d" && !hasPK)
		if ti.keyless && !cfg.AllowKeyless {
			findings = append(findings, Finding{Object: "table " + ti.name,
				Problem: fmt.Sprintf("table %s has no primary key and no replica identity, so its updates and deletes cannot be identified", ti.name),
				Fix:     fmt.Sprintf("add a primary key, or run ALTER TABLE %s REPLICA IDENTITY FULL (or set allow_keyless = true in the source block to deliver its changes with key null)", ti.name)})
		}
		out = append(out, ti)
	}
	return out, findings, nil
}

// keylessOf lists the keyless tables, "schema.table".
func keylessOf(tables []tableInfo) []string {
	var out []string
	for _, t := range tables {
		if t.keyless {
			out = append(out, t.name)
		}
	}
	return out
}

// publicationFindings checks the pipeline's publications. One walcast
// creates or keeps in step (missing, or recorded as walcast's) needs the
// CREATE privilege on the database to be created, its ownership to be
// altered, and the ownership of every table it must add. One someone
// else made must already publish every table, partitioned ones under
// their root's name.
func publicationFindings(ctx context.Context, db Querier, records Records, cfg Config, access SchemaAccess, tables []tableInfo) ([]Finding, error) {
	var exists bool
	var owner string
	var mine bool
	err := db.QueryRow(ctx, `SELECT pubowner::regrole::text, pg_has_role(pubowner, 'USAGE') FROM pg_publication WHERE pubname = $1`, cfg.Publication).Scan(&owner, &mine)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, fmt.Errorf("look up publication %s: %w", cfg.Publication, err)
	default:
		exists = true
	}
	ours := false
	if exists && access.Exists && len(access.Denied) == 0 {
		rec, known, err := records.LoadRecord(ctx)
		if err != nil {
			return nil, err
		}
		ours = known && rec.CreatedPublication && rec.Publication == cfg.Publication
	}
	if exists && !ours {
		return foreignPublication(ctx, db, cfg, tables)
	}
	var out []Finding
	role := access.Role
	if !exists && !access.CanCreate {
		out = append(out, Finding{Object: "database " + access.Database,
			Problem: fmt.Sprintf("role %s may not create publication %s in database %s", role, cfg.Publication, access.Database),
			Fix:     fmt.Sprintf("run GRANT CREATE ON DATABASE %s TO %s, or create the publication as the tables' owner and name it in the source block (publication = \"…\")", pg.Ident(access.Database), pg.Ident(role))})
	}
	if exists && !mine {
		out = append(out, Finding{Object: "publication " + cfg.Publication,
			Problem: fmt.Sprintf("role %s does not own publication %s (role %s does), which walcast created and keeps in step with the tables", role, cfg.Publication, owner),
			Fix:     fmt.Sprintf("run this pipeline as role %s, or ALTER PUBLICATION %s OWNER TO %s", owner, pg.Ident(cfg.Publication), pg.Ident(role))})
	}
	for _, t := range tables {
		if t.owned {
			continue
		}
		pub := cfg.Publication
		if t.keyless {
			pub = KeylessPublication(cfg.Publication)
		}
		member, err := publishes(ctx, db, pub, t.name)
		if err != nil {
			return nil, err
		}
		if member {
			continue // nothing to add
		}
		out = append(out, Finding{Object: "table " + t.name,
			Problem: fmt.Sprintf("role %s does not own table %s (role %s does), and only a table's owner may add it to a publication", role, t.name, t.owner),
			Fix: fmt.Sprintf("run ALTER TABLE %s OWNER TO %s, or as role %s run CREATE PUBLICATION %s FOR TABLE %s WITH (publish_via_partition_root = true) and name it in the source block (publication = %q)",
				pg.Ident(strings.Split(t.name, ".")...), pg.Ident(role), t.owner, pg.Ident(cfg.Publication), pg.Ident(strings.Split(t.name, ".")...), cfg.Publication)})
	}
	return out, nil
}

// publishes reports whether publication pub names table (schema.table)
// itself (pg_publication_rel: what ALTER PUBLICATION would add).
func publishes(ctx context.Context, db Querier, pub, table string) (bool, error) {
	schema, name, _ := strings.Cut(table, ".")
	var in bool
	err := db.QueryRow(ctx, `
SELECT EXISTS (SELECT 1 FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
               JOIN pg_class c ON c.oid = pr.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE p.pubname = $1 AND n.nspname = $2 AND c.relname = $3)`, pub, schema, name).Scan(&in)
	if err != nil {
		return false, fmt.Errorf("inspect publication %s: %w", pub, err)
	}
	return in, nil
}

// foreignPublication checks a publication walcast did not create, which
// it uses as it is: it must publish every configured table (else its
// changes would silently never arrive), partitioned ones under their
// root's name (else a sink filtering on the listed name gets none).
func foreignPublication(ctx context.Context, db Querier, cfg Config, tables []tableInfo) ([]Finding, error) {
	var viaRoot bool
	if err := db.QueryRow(ctx, `SELECT pubviaroot FROM pg_publication WHERE pubname = $1`, cfg.Publication).Scan(&viaRoot); err != nil {
		return nil, fmt.Errorf("inspect publication %s: %w", cfg.Publication, err)
	}
	pub := pgx.Identifier{cfg.Publication}.Sanitize()
	var out []Finding
	for _, t := range tables {
		if t.partitioned && !viaRoot {
			out = append(out, Finding{Object: "publication " + cfg.Publication,
				Problem: fmt.Sprintf("publication %s publishes the partitioned table %s under the names of its partitions (publish_via_partition_root is off), so its events would not carry the name %s", cfg.Publication, t.name, t.name),
				Fix:     fmt.Sprintf("run ALTER PUBLICATION %s SET (publish_via_partition_root = true), or leave the publication out of the source block so that walcast creates its own", pub)})
			continue // it publishes the partitions, not the root
		}
		schema, name, _ := strings.Cut(t.name, ".")
		var in bool
		err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)`,
			cfg.Publication, schema, name).Scan(&in)
		if err != nil {
			return nil, fmt.Errorf("inspect publication %s: %w", cfg.Publication, err)
		}
		if !in {
			out = append(out, Finding{Object: "publication " + cfg.Publication,
				Problem: fmt.Sprintf("publication %s exists but does not publish %s", cfg.Publication, t.name),
				Fix:     fmt.Sprintf("run ALTER PUBLICATION %s ADD TABLE %s, or name another publication in the source block", pub, qualified(t.name))})
		}
	}
	return out, nil
}

// slotFindings checks an existing slot is one walcast can stream (pgoutput,
// this database), or that a free slot is left to create it.
func slotFindings(ctx context.Context, db Querier, slot string) ([]Finding, error) {
	s, err := lookupSlot(ctx, db, slot)
	if err != nil {
		return nil, err
	}
	if s.exists {
		if err := s.usable(slot); err != nil {
			problem, fix, _ := strings.Cut(err.Error(), ": ")
			return []Finding{{Object: "replication slot " + slot, Problem: problem, Fix: fix}}, nil
		}
		return nil, nil
	}
	var used, limit int
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots), current_setting('max_replication_slots')::int`).Scan(&used, &limit); err != nil {
		return nil, fmt.Errorf("count replication slots: %w", err)
	}
	if used >= limit {
		return []Finding{{Object: "setting max_replication_slots",
			Problem: fmt.Sprintf("all %d replication slots (max_replication_slots) are in use, so slot %s cannot be created", limit, slot),
			Fix:     "drop a slot nobody uses (pg_drop_replication_slot), or raise max_replication_slots in postgresql.conf and restart PostgreSQL"}}, nil
	}
	return nil, nil
}

// identifySystem opens a replication connection and asks for the
// cluster's system identifier, which any role that may stream can read.
func identifySystem(ctx context.Context, dsn string) (string, error) {
	pcfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "", fmt.Errorf("parse source dsn: %w", err)
	}
	pcfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, pcfg)
	if err != nil {
		return "", pg.ConnectFailed("open a replication connection to", pcfg, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	res, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return "", err
	}
	return res.SystemID, nil
}

// Plan is what a start of the pipeline would find on the source and do
// there, read by PlanStart without creating or changing anything: the
// facts an operator checks before the first `walcast run` (`walcast
// validate --source` prints it), and every reason the start would refuse.
type Plan struct {
	// Server is PostgreSQL's version ("15.18"); WALLevel its wal_level.
	Server, WALLevel string
	Role             RoleFacts
	// Schema is the walcast schema: "exists" or "create".
	Schema PlannedObject
	Tables []TableFacts
	// Publications are the pipeline's publication and, when walcast
	// creates or keeps it, the keyless one.
	Publications []PlannedObject
	Slot         PlannedObject
	// Findings are Preflight's: each refuses the start.
	Findings []Finding
	// Refusal is why the start would refuse to stream from the slot
	// (Diagnose); nil when it would not, or when the walcast schema
	// cannot be read yet.
	Refusal *GapError
}

// RoleFacts are the connecting role's attributes and grants that a start
// needs.
type RoleFacts struct {
	Name string
	// Superuser and Replication are the role's attributes; CreateOnDB the
	// CREATE privilege on the database (schema walcast, publications).
	Superuser, Replication, CreateOnDB bool
	Database                           string
}

// PlannedObject is a schema, publication or slot and what a start does
// with it.
type PlannedObject struct {
	Name string
	// Action is "exists" (used as it is), "update" (walcast keeps it in
	// step: Detail says how), "create", or "refused" (a Finding says why).
	Action string
	Detail string
}

// TableFacts are what a start finds of one configured table.
type TableFacts struct {
	Name        string // schema.table
	Exists      bool
	Partitioned bool
	// Identity is how its rows are identified: "primary key (id)",
	// "replica identity full", "replica identity index x", or "none".
	Identity string
	Keyless  bool
	Owner    string
	Owned    bool
	// RowFilter and Columns are the publication's row filter and column
	// list for the table, when an existing publication has them.
	RowFilter string
	Columns   []string
	// TOAST are the columns PostgreSQL may store out of line: an update
	// that leaves them unchanged does not carry their values.
	TOAST []string
}

// PlanStart reads the Plan of a start of the pipeline. db should be a
// read-only session (default_transaction_read_only): PlanStart writes
// nothing, and such a session proves it. The replication connection it
// opens to check the role creates nothing either.
func PlanStart(ctx context.Context, db Querier, l Ledger, cfg Config) (Plan, error) {
	var p Plan
	var err error
	if p.Findings, err = Preflight(ctx, db, l, cfg); err != nil {
		return p, err
	}
	if err := db.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('wal_level'), r.rolname::text, r.rolsuper, r.rolreplication,
	has_database_privilege(current_database(), 'CREATE'), current_database()::text
FROM pg_roles r WHERE r.rolname = current_user`).Scan(&p.Server, &p.WALLevel, &p.Role.Name, &p.Role.Superuser, &p.Role.Replication, &p.Role.CreateOnDB, &p.Role.Database); err != nil {
		return p, fmt.Errorf("read the server's version and the role's attributes: %w", err)
	}
	access, err := l.Access(ctx)
	if err != nil {
		return p, err
	}
	p.Schema = planSchema(access)
	for _, t := range cfg.Tables {
		tf, err := tableFacts(ctx, db, cfg, t)
		if err != nil {
			return p, err
		}
		p.Tables = append(p.Tables, tf)
	}
	readable := access.Exists && len(access.Denied) == 0
	if p.Publications, err = planPublications(ctx, db, l, cfg, readable, p.Tables); err != nil {
		return p, err
	}
	if p.Slot, err = planSlot(ctx, db, cfg.Slot); err != nil {
		return p, err
	}
	if readable {
		if p.Refusal, err = Diagnose(ctx, db, l, cfg); err != nil {
			return p, err
		}
	}
	p.mark()
	return p, nil
}

// mark sets the action of every object a finding is about to "refused".
func (p *Plan) mark() {
	for _, f := range p.Findings {
		for _, o := range append([]*PlannedObject{&p.Schema, &p.Slot}, pointers(p.Publications)...) {
			if f.Object == "publication "+o.Name || f.Object == "replication slot "+o.Name || f.Object == "schema "+o.Name {
				o.Action = "refused"
			}
		}
	}
}

func pointers(os []PlannedObject) []*PlannedObject {
	out := make([]*PlannedObject, len(os))
	for i := range os {
		out[i] = &os[i]
	}
	return out
}

// planSchema says what a start does with the walcast schema.
func planSchema(a SchemaAccess) PlannedObject {
	o := PlannedObject{Name: pg.ControlSchema}
	switch {
	case !a.Exists && a.CanCreate:
		o.Action, o.Detail = "create", "walcast's state: checkpoints, parked events, leaderships"
	case !a.Exists:
		o.Action, o.Detail = "refused", "does not exist, and role "+a.Role+" may not create it"
	case len(a.Denied) > 0 || a.MigrateAs != "":
		o.Action, o.Detail = "refused", "owned by role "+a.Owner
	case a.Version < a.Latest:
		o.Action, o.Detail = "update", fmt.Sprintf("owned by role %s; migrated from version %d to %d", a.Owner, a.Version, a.Latest)
	default:
		o.Action, o.Detail = "exists", fmt.Sprintf("owned by role %s, version %d", a.Owner, a.Version)
	}
	return o
}

// tableFacts reads what a start finds of configured table t.
func tableFacts(ctx context.Context, db Querier, cfg Config, t string) (TableFacts, error) {
	schema, name, _ := strings.Cut(canonical(t), ".")
	tf := TableFacts{Name: schema + "." + name}
	var oid uint32
	var ident, pk, index string
	err := db.QueryRow(ctx, `
SELECT c.oid, c.relkind = 'p', c.relreplident::text, c.relowner::regrole::text, pg_has_role(c.relowner, 'USAGE'),
       coalesce((SELECT string_agg(a.attname, ', ' ORDER BY k.ord) FROM pg_index i
                 CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
                 JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
                 WHERE i.indrelid = c.oid AND i.indisprimary), ''),
       coalesce((SELECT ci.relname::text FROM pg_index i JOIN pg_class ci ON ci.oid = i.indexrelid
                 WHERE i.indrelid = c.oid AND i.indisreplident), ''),
       ARRAY(SELECT a.attname::text FROM pg_attribute a
             WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attstorage IN ('x', 'e') ORDER BY a.attnum)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`, schema, name).Scan(
		&oid, &tf.Partitioned, &ident, &tf.Owner, &tf.Owned, &pk, &index, &tf.TOAST)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return tf, nil
	case err != nil:
		return tf, fmt.Errorf("inspect table %s: %w", tf.Name, err)
	}
	tf.Exists = true
	switch {
	case ident == "f":
		tf.Identity = "replica identity full"
	case ident == "i":
		tf.Identity = "replica identity index " + index
	case ident == "d" && pk != "":
		tf.Identity = "primary key (" + pk + ")"
	default:
		tf.Identity, tf.Keyless = "none", true
	}
	err = db.QueryRow(ctx, `
SELECT coalesce(pg_get_expr(pr.prqual, pr.prrelid), ''),
       ARRAY(SELECT a.attname::text FROM unnest(pr.prattrs::int2[]) AS k(attnum)
             JOIN pg_attribute a ON a.attrelid = pr.prrelid AND a.attnum = k.attnum)
FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
WHERE p.pubname IN ($1, $2) AND pr.prrelid = $3 LIMIT 1`, cfg.Publication, KeylessPublication(cfg.Publication), oid).Scan(&tf.RowFilter, &tf.Columns)
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case errors.As(err, &pgErr) && pgErr.Code == "42703":
		// Before PostgreSQL 15 publications have no row filters or
		// column lists.
	case err != nil:
		return tf, fmt.Errorf("read how publication %s publishes table %s: %w", cfg.Publication, tf.Name, err)
	}
	return tf, nil
}

// planPublications says what a start does with the pipeline's
// publications: creates them, keeps walcast's own in step with the table
// list, or uses someone else's as it is. readable: the walcast schema
// exists and the role may read it (else nothing is recorded as
// walcast's).
func planPublications(ctx context.Context, db Querier, records Records, cfg Config, readable bool, tables []TableFacts) ([]PlannedObject, error) {
	var keyed, unkeyed []string
	for _, t := range tables {
		switch {
		case !t.Exists:
		case t.Keyless:
			unkeyed = append(unkeyed, t.Name)
		default:
			keyed = append(keyed, t.Name)
		}
	}
	exists, err := publicationExists(ctx, db, cfg.Publication)
	if err != nil {
		return nil, err
	}
	ours := false
	if exists && readable {
		rec, known, err := records.LoadRecord(ctx)
		if err != nil {
			return nil, err
		}
		ours = known && rec.CreatedPublication && rec.Publication == cfg.Publication
	}
	kpub := KeylessPublication(cfg.Publication)
	switch {
	case !exists:
		return []PlannedObject{
			{Name: cfg.Publication, Action: "create", Detail: "for " + tableList(keyed) + ", with publish_via_partition_root"},
			{Name: kpub, Action: "create", Detail: keylessDetail(unkeyed)},
		}, nil
	case !ours:
		return []PlannedObject{{Name: cfg.Publication, Action: "exists", Detail: "not created by walcast: used as it is"}}, nil
	}
	main, err := planMembers(ctx, db, cfg.Publication, keyed)
	if err != nil {
		return nil, err
	}
	out := []PlannedObject{main}
	kexists, err := publicationExists(ctx, db, kpub)
	switch {
	case err != nil:
		return nil, err
	case kexists:
		k, err := planMembers(ctx, db, kpub, unkeyed)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	case len(unkeyed) > 0:
		out = append(out, PlannedObject{Name: kpub, Action: "create", Detail: keylessDetail(unkeyed)})
	}
	return out, nil
}

// planMembers compares a publication walcast created with the tables it
// must publish.
func planMembers(ctx context.Context, db Querier, pub string, want []string) (PlannedObject, error) {
	rows, err := db.Query(ctx, `
SELECT n.nspname || '.' || c.relname FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
JOIN pg_class c ON c.oid = pr.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE p.pubname = $1 ORDER BY 1`, pub)
	if err != nil {
		return PlannedObject{}, fmt.Errorf("list tables of publication %s: %w", pub, err)
	}
	members, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return PlannedObject{}, fmt.Errorf("list tables of publication %s: %w", pub, err)
	}
	var add, drop []string
	for _, t := range want {
		if !slices.Contains(members, t) {
			add = append(add, t)
		}
	}
	for _, m := range members {
		if !slices.Contains(want, m) {
			drop = append(drop, m)
		}
	}
	o := PlannedObject{Name: pub, Action: "exists", Detail: "created by walcast, publishes " + tableList(members)}
	if len(add) > 0 || len(drop) > 0 {
		var parts []string
		if len(add) > 0 {
			parts = append(parts, "adds "+tableList(add))
		}
		if len(drop) > 0 {
			parts = append(parts, "drops "+tableList(drop))
		}
		o.Action, o.Detail = "update", "created by walcast; "+strings.Join(parts, ", ")
	}
	return o, nil
}

// keylessDetail says what the keyless publication publishes.
func keylessDetail(tables []string) string {
	if len(tables) == 0 {
		return "for the inserts and truncates of tables without a key; none yet"
	}
	return "for the inserts and truncates of " + strings.Join(tables, ", ") + ", which have no key"
}

func publicationExists(ctx context.Context, db Querier, pub string) (bool, error) {
	var exists bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, pub).Scan(&exists); err != nil {
		return false, fmt.Errorf("look up publication %s: %w", pub, err)
	}
	return exists, nil
}

// tableList is tables for a sentence: "public.a, public.b", or "no table".
func tableList(tables []string) string {
	if len(tables) == 0 {
		return "no table yet"
	}
	return strings.Join(tables, ", ")
}

// planSlot says what a start does with the pipeline's slot.
func planSlot(ctx context.Context, db Querier, slot string) (PlannedObject, error) {
	s, err := lookupSlot(ctx, db, slot)
	if err != nil {
		return PlannedObject{}, err
	}
	if !s.exists {
		return PlannedObject{Name: slot, Action: "create", Detail: "logical, plugin pgoutput, starting at the current end of the WAL"}, nil
	}
	var pid *int32
	if err := db.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&pid); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return PlannedObject{}, fmt.Errorf("look up replication slot %s: %w", slot, err)
	}
	detail := fmt.Sprintf("plugin %s, confirmed up to %s", s.plugin, cdc.FormatLSN(s.confirmed))
	if pid != nil {
		detail += fmt.Sprintf(", in use by server process %d", *pid)
	}
	if s.walStatus != "" && s.walStatus != "reserved" {
		detail += ", wal_status " + s.walStatus
	}
	return PlannedObject{Name: slot, Action: "exists", Detail: detail}, nil
}
