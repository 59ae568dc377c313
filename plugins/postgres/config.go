package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/pluginkit"
)

// The two things the sink can make of the stream.
const (
	modeMirror  = "mirror"
	modeHistory = "history"
)

const (
	defaultCheckpointTable = "public.walcast_checkpoints"
	defaultHistoryTable    = "public.walcast_history"
	// defaultBatchSize: one transaction per batch, whose fixed cost (begin,
	// the checkpoint row, commit) is paid per Deliver, so this sink asks
	// for larger batches than the host's default 100.
	defaultBatchSize = 1000
	// maxConns bounds the pool: mirror mode uses one connection at a time
	// (ordered), history mode at most the host's max_in_flight.
	maxConns = 8
)

// configFields declares the config block for `walcast validate`.
var configFields = []pluginkit.ConfigField{
	{Name: "dsn", Type: pluginkit.TypeString, Required: true, Doc: `The target database, as a libpq URL or key=value string: "postgres://walcast@db2:5432/shop?sslmode=verify-full&sslrootcert=/etc/walcast/ca.pem". TLS (sslmode, sslrootcert, sslcert, sslkey) and authentication (user, password, passfile) are libpq's parameters.`},
	{Name: "password", Type: pluginkit.TypeString, Doc: `The password, when it should not be written in dsn (password = env("TARGET_PASSWORD")). Overrides the dsn's.`},
	{Name: "mode", Type: pluginkit.TypeString, Doc: `"mirror" (default): each source table is kept as a table of the same rows in the target (upsert, delete, truncate). "history": every event is appended as a row of one table.`},
	{Name: "schema", Type: pluginkit.TypeString, Doc: `mirror: the target schema of every mirrored table (default: the source table's schema).`},
	{Name: "tables", Type: pluginkit.TypeStringMap, Doc: `mirror: per-table target names, "schema.table" = "target_schema.target_table", instead of the same name.`},
	{Name: "create_tables", Type: pluginkit.TypeBool, Doc: `mirror: true (default) creates a missing target table (every column jsonb, primary key = the event's key columns) and adds missing columns as jsonb; false: the target tables must exist with every column the source sends and a primary key.`},
	{Name: "checkpoint_table", Type: pluginkit.TypeString, Doc: `mirror: the table holding the sink's checkpoint, written in each batch's transaction. Default "public.walcast_checkpoints".`},
	{Name: "checkpoint_key", Type: pluginkit.TypeString, Doc: `mirror: this sink's row in checkpoint_table. Default "<pipeline>/<sink id>"; keep it stable and unique per sink.`},
	{Name: "history_table", Type: pluginkit.TypeString, Doc: `history: the table every event is appended to, created when missing. Default "public.walcast_history".`},
}

// config is the JSON the host sends, as written in the pipeline.
type config struct {
	DSN             string            `json:"dsn"`
	Password        string            `json:"password"`
	Mode            string            `json:"mode"`
	Schema          string            `json:"schema"`
	Tables          map[string]string `json:"tables"`
	CreateTables    *bool             `json:"create_tables"`
	CheckpointTable string            `json:"checkpoint_table"`
	CheckpointKey   string            `json:"checkpoint_key"`
	HistoryTable    string            `json:"history_table"`
}

// settings is the validated config.
type settings struct {
	pool            *pgxpool.Config
	target          string // host:port/db for messages: never the password
	mode            string
	schema          string
	tables          map[string]qname // source "schema.table" -> target
	create          bool
	checkpointTable qname
	checkpointKey   string
	historyTable    qname
}

// qname is a schema-qualified table name.
type qname struct{ schema, name string }

func (q qname) String() string { return q.schema + "." + q.name }

// sql is the name quoted for SQL.
func (q qname) sql() string { return quoteIdent(q.schema) + "." + quoteIdent(q.name) }

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// parseQName reads "schema.table" or "table" (in schema def). The name is
// taken as written, case included: no SQL identifier folding.
func parseQName(s, def string) (qname, bool) {
	schema, name, ok := strings.Cut(s, ".")
	if !ok {
		schema, name = def, s
	}
	if schema == "" || name == "" || strings.Contains(name, ".") {
		return qname{}, false
	}
	return qname{schema, name}, true
}

func decodeConfig(raw json.RawMessage, id pluginkit.Identity, tables []string) (settings, error) {
	var c config
	if err := pluginkit.DecodeConfig(raw, &c); err != nil {
		return settings{}, err
	}
	st := settings{
		mode:          cmp.Or(c.Mode, modeMirror),
		schema:        c.Schema,
		create:        c.CreateTables == nil || *c.CreateTables,
		checkpointKey: c.CheckpointKey,
		tables:        map[string]qname{},
	}
	if st.checkpointKey == "" {
		st.checkpointKey = cmp.Or(id.Pipeline, "walcast") + "/" + cmp.Or(id.SinkID, "postgres")
	}
	var errs []error
	if err := parseDSN(&st, c); err != nil {
		errs = append(errs, err)
	}
	if st.mode != modeMirror && st.mode != modeHistory {
		errs = append(errs, &pluginkit.ConfigError{Field: "mode", Msg: fmt.Sprintf("%q: want \"mirror\" or \"history\"", c.Mode)})
	}
	errs = append(errs, parseNames(&st, c)...)
	if st.mode == modeHistory {
		errs = append(errs, mirrorOnly(c)...)
	} else {
		errs = append(errs, mapTables(&st, c.Tables, tables)...)
	}
	return st, errors.Join(errs...)
}

func parseDSN(st *settings, c config) error {
	if strings.TrimSpace(c.DSN) == "" {
		return &pluginkit.ConfigError{Field: "dsn", Msg: `is required: the target database, e.g. "postgres://walcast@db2:5432/shop"`}
	}
	pc, err := pgxpool.ParseConfig(c.DSN)
	if err != nil {
		// pgconn's parse errors already leave the password out.
		return &pluginkit.ConfigError{Field: "dsn", Msg: err.Error()}
	}
	if c.Password != "" {
		pc.ConnConfig.Password = c.Password
	}
	pc.MaxConns = maxConns
	st.pool = pc
	st.target = fmt.Sprintf("%s:%d/%s", pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.Database)
	return nil
}

func parseNames(st *settings, c config) []error {
	var errs []error
	var ok bool
	if st.checkpointTable, ok = parseQName(cmp.Or(c.CheckpointTable, defaultCheckpointTable), "public"); !ok {
		errs = append(errs, &pluginkit.ConfigError{Field: "checkpoint_table", Msg: fmt.Sprintf("%q: want \"schema.table\" or \"table\"", c.CheckpointTable)})
	}
	if st.historyTable, ok = parseQName(cmp.Or(c.HistoryTable, defaultHistoryTable), "public"); !ok {
		errs = append(errs, &pluginkit.ConfigError{Field: "history_table", Msg: fmt.Sprintf("%q: want \"schema.table\" or \"table\"", c.HistoryTable)})
	}
	if strings.Contains(c.Schema, ".") {
		errs = append(errs, &pluginkit.ConfigError{Field: "schema", Msg: fmt.Sprintf("%q: a schema name, without a dot", c.Schema)})
	}
	return errs
}

// mirrorOnly rejects the mirror attributes in history mode, where they
// would be silently ignored.
func mirrorOnly(c config) []error {
	var errs []error
	for name, set := range map[string]bool{
		"schema": c.Schema != "", "tables": c.Tables != nil, "create_tables": c.CreateTables != nil,
		"checkpoint_table": c.CheckpointTable != "", "checkpoint_key": c.CheckpointKey != "",
	} {
		if set {
			errs = append(errs, &pluginkit.ConfigError{Field: name, Msg: `only applies with mode = "mirror"`})
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return cmp.Compare(a.Error(), b.Error()) })
	return errs
}

// mapTables checks the tables map and that no two source tables would
// share a target table, or use the checkpoint table.
func mapTables(st *settings, m map[string]string, tables []string) []error {
	var errs []error
	for src, dst := range m {
		q, ok := parseQName(dst, cmp.Or(st.schema, "public"))
		if !ok || !strings.Contains(src, ".") {
			errs = append(errs, &pluginkit.ConfigError{Field: "tables", Msg: fmt.Sprintf("%q = %q: want \"schema.table\" = \"target_schema.target_table\"", src, dst)})
			continue
		}
		st.tables[src] = q
	}
	owner := map[qname]string{}
	for _, t := range tables {
		q := st.targetOf(t)
		switch {
		case q == st.checkpointTable:
			errs = append(errs, &pluginkit.ConfigError{Field: "tables", Table: t, Msg: fmt.Sprintf("table %s would be mirrored into the checkpoint table %s: name another target in tables", t, q)})
		case owner[q] != "":
			errs = append(errs, &pluginkit.ConfigError{Field: "tables", Table: t, Msg: fmt.Sprintf("tables %s and %s would both be mirrored into %s: name another target in tables", owner[q], t, q)})
		default:
			owner[q] = t
		}
	}
	return errs
}

// targetOf is the target table of the source table "schema.table".
func (st settings) targetOf(source string) qname {
	if q, ok := st.tables[source]; ok {
		return q
	}
	schema, name, _ := strings.Cut(source, ".")
	return qname{cmp.Or(st.schema, schema), name}
}
