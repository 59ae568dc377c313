package pg

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Permanent reports whether retrying cannot fix err: PostgreSQL refused
// the role (class 28: authentication, pg_hba.conf, a role that may not
// log in), a privilege or a name is missing (class 42, 3D000, 3F000), the
// replication slots are all taken (53400), or logical decoding is off
// (wal_level). Errors that are not PostgreSQL's (the network, a
// cancelled context) and the server's passing states (shutting down,
// starting up, too many connections, serialization failures, lock
// timeouts) are not permanent: those are retried.
func Permanent(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return true
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch {
	case strings.HasPrefix(pgErr.Code, "28"), strings.HasPrefix(pgErr.Code, "42"):
		return true
	case pgErr.Code == "3D000", pgErr.Code == "3F000", pgErr.Code == "53400":
		return true
	case pgErr.Code == "55000" && strings.Contains(pgErr.Message, "wal_level"):
		return true
	}
	return false
}

// Error is a permanent error of the source database, explained.
type Error struct {
	// Role is the role walcast logs in as ("" when unknown).
	Role string
	// Problem says what is wrong, naming the role and the object; Fix is
	// the statement or setting that fixes it.
	Problem, Fix string
	// Err is the error as it happened, with what walcast was doing.
	Err error
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s; retrying cannot fix this, so walcast stops (%v)", e.Problem, e.Fix, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Explain returns err unchanged unless it is Permanent; then an *Error
// saying what role (as given: Role(dsn)) lacks on which object, and what
// fixes it. An error explained already is returned as it is.
func Explain(err error, role string) error {
	if !Permanent(err) {
		return err
	}
	var done *Error
	if errors.As(err, &done) {
		return err
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	who := "role " + role
	if role == "" {
		who = "the dsn's role"
		role = "<role>"
	}
	problem, fix := explain(pgErr, who, role)
	return &Error{Role: role, Problem: problem, Fix: fix, Err: err}
}

// Role is the role a connection string logs in as (its user, else
// PGUSER, else the operating system user, as libpq and pgx decide);
// "" when the string cannot be parsed.
func Role(dsn string) string {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return ""
	}
	return cfg.User
}

// Ident spells a possibly qualified name the way a statement an operator
// copies needs it: each part as it is when that is how PostgreSQL reads
// it, else quoted.
func Ident(parts ...string) string {
	out := make([]string, len(parts))
	for i, p := range parts {
		if plainIdent.MatchString(p) {
			out[i] = p
		} else {
			out[i] = pgx.Identifier{p}.Sanitize()
		}
	}
	return strings.Join(out, ".")
}

func quoteIdent(name string) string { return Ident(name) }

var plainIdent = regexp.MustCompile(`^[a-z_][a-z0-9_$]*$`)

// GrantsOnControlSchema is what fixes a role's missing privileges on a
// walcast schema another role created (docs/operations.md, "Roles and
// grants"): the GRANTs, and who may run them.
func GrantsOnControlSchema(role string) string {
	return fmt.Sprintf("as the owner of schema %[1]s (the role that first ran walcast in this database) or a superuser, run GRANT USAGE ON SCHEMA %[1]s TO %[2]s; GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %[1]s TO %[2]s; GRANT USAGE ON ALL SEQUENCES IN SCHEMA %[1]s TO %[2]s (see \"Roles and grants\" in docs/operations.md)",
		ControlSchema, role)
}

var (
	deniedFor  = regexp.MustCompile(`^permission denied for (schema|table|sequence|database|relation|view|function) "?([^"]+)"?$`)
	mustOwn    = regexp.MustCompile(`^must be owner of (table|publication|schema|relation|database|sequence|index) "?([^"]+)"?$`)
	notExist   = regexp.MustCompile(`^(relation|schema|database|role|publication|function) "([^"]+)" does not exist$`)
	notLogin   = regexp.MustCompile(`^role "([^"]+)" is not permitted to log in$`)
	replicates = regexp.MustCompile(`(?i)replication role|replication attribute|use replication slots|start wal ?sender`)
)

// explain says what is wrong and what fixes it, from PostgreSQL's code
// and message (the message's words are stable across versions; the
// fallback quotes the message when they change).
func explain(e *pgconn.PgError, who, role string) (problem, fix string) {
	msg := e.Message
	switch {
	case e.Code == "28P01":
		return who + " could not log in: wrong password", "correct the password in the dsn (or, as a superuser, ALTER ROLE " + quoteIdent(role) + " PASSWORD '…')"
	case e.Code == "28000" && strings.Contains(msg, "pg_hba.conf"):
		return "pg_hba.conf has no line that lets " + who + " connect", "add one for this database and role (e.g. host DBNAME " + quoteIdent(role) + " 10.0.0.0/8 scram-sha-256; a logical replication connection matches the database's line, not the replication keyword) and reload PostgreSQL"
	case notLogin.MatchString(msg):
		return who + " may not log in", "as a superuser, run ALTER ROLE " + quoteIdent(role) + " LOGIN"
	case strings.HasPrefix(e.Code, "28"):
		if m := notExist.FindStringSubmatch(msg); m != nil && m[1] == "role" {
			return "role " + m[2] + " does not exist", "create it (CREATE ROLE " + quoteIdent(m[2]) + " LOGIN REPLICATION) or fix the user in the dsn"
		}
		return who + " was refused: " + msg, "check the dsn's user and password, and pg_hba.conf"
	case e.Code == "3D000":
		if m := notExist.FindStringSubmatch(msg); m != nil {
			return "database " + m[2] + " does not exist", "create it or fix the database in the dsn"
		}
		return msg, "fix the database in the dsn"
	case e.Code == "53400":
		return "PostgreSQL refused a replication slot: " + msg, "raise max_replication_slots in postgresql.conf and restart PostgreSQL, or drop a slot nobody uses (pg_drop_replication_slot)"
	case e.Code == "55000":
		return "logical decoding is off: " + msg, "run ALTER SYSTEM SET wal_level = logical and restart PostgreSQL"
	case replicates.MatchString(msg) || replicates.MatchString(e.Detail):
		return who + " lacks the REPLICATION attribute, which creating and streaming a replication slot needs", "as a superuser, run ALTER ROLE " + quoteIdent(role) + " REPLICATION"
	}
	if m := deniedFor.FindStringSubmatch(msg); m != nil {
		return explainDenied(m[1], m[2], e, who, role)
	}
	if m := mustOwn.FindStringSubmatch(msg); m != nil {
		kind, name := m[1], m[2]
		if kind == "table" || kind == "relation" {
			return who + " does not own table " + name + ", and only its owner may add it to a publication",
				"run ALTER TABLE " + name + " OWNER TO " + quoteIdent(role) + ", or create the publication as the table's owner (CREATE PUBLICATION … FOR TABLE " + name + ") and name it in the source block (publication = \"…\")"
		}
		return who + " does not own " + kind + " " + name, "run walcast as its owner, or ALTER " + strings.ToUpper(kind) + " " + name + " OWNER TO " + quoteIdent(role)
	}
	if m := notExist.FindStringSubmatch(msg); m != nil {
		if m[1] == "schema" && m[2] == ControlSchema || m[1] == "relation" && strings.HasPrefix(m[2], ControlSchema+".") {
			return m[1] + " " + m[2] + " does not exist (dropped while walcast ran?)", "restart walcast, which creates the walcast schema again"
		}
		return m[1] + " " + m[2] + " does not exist", "create it, or remove it from the pipeline"
	}
	if e.Code == "42501" {
		return who + " lacks a privilege: " + msg, "grant " + quoteIdent(role) + " what PostgreSQL names (see \"Roles and grants\" in docs/operations.md)"
	}
	return "PostgreSQL refused a statement of walcast: " + msg + " (SQLSTATE " + e.Code + ")", "fix the cause PostgreSQL names"
}

func explainDenied(kind, name string, e *pgconn.PgError, who, role string) (problem, fix string) {
	r := quoteIdent(role)
	switch kind {
	case "schema":
		if name == ControlSchema {
			return who + " may not use schema " + ControlSchema + ", which another role created", GrantsOnControlSchema(role)
		}
		return who + " may not use schema " + name, "run GRANT USAGE ON SCHEMA " + quoteIdent(name) + " TO " + r
	case "sequence":
		return who + " may not use sequence " + name, GrantsOnControlSchema(role)
	case "database":
		if strings.Contains(e.Detail, "CONNECT") {
			return who + " may not connect to database " + name, "run GRANT CONNECT ON DATABASE " + quoteIdent(name) + " TO " + r
		}
		return who + " may not create schemas or publications in database " + name, "run GRANT CREATE ON DATABASE " + quoteIdent(name) + " TO " + r + " (walcast creates its schema and the pipeline's publication)"
	}
	if isControlTable(name) {
		return who + " may not use table " + ControlSchema + "." + name + ", which another role created", GrantsOnControlSchema(role)
	}
	return who + " may not read table " + name + " the way a backfill does", "run GRANT SELECT, UPDATE ON " + name + " TO " + r + " (a backfill reads the table and locks the rows it reads with FOR SHARE, which needs UPDATE; it changes nothing)"
}

// controlTables are the tables of the walcast schema (checkpoint's
// migrations); PostgreSQL names a table in "permission denied" without
// its schema.
var controlTables = []string{
	"schema_version", "pipelines", "checkpoints", "parked", "replay_requests", "usage", "pauses",
	"gaps", "sink_failures", "backfills", "backfill_tables", "catchup_slots", "sink_backlog",
	"published_tables", "leaderships", "streams",
	"table_shapes", "partitions",
}

func isControlTable(name string) bool {
	name = strings.TrimPrefix(name, ControlSchema+".")
	for _, t := range controlTables {
		if t == name {
			return true
		}
	}
	return false
}
