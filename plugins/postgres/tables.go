package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// querier is what the catalog reads and DDL need: the pool, or a
// connection.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// table is what the sink knows of one target table of mirror mode: read
// from the target's catalog, so values are converted to the column types
// the target has, whatever the source's were.
type table struct {
	name qname
	cols map[string]column
	// pk lists the primary key's columns in index order: the row identity
	// upserts and deletes go by.
	pk []string
	// identityAlways: a GENERATED ALWAYS AS IDENTITY column takes the
	// source's values only with OVERRIDING SYSTEM VALUE.
	identityAlways bool
}

// column is one column of a target table.
type column struct {
	name string
	// bytea and byteaArray: the envelope carries bytea as base64 text,
	// which PostgreSQL's bytea input would take as escape-format bytes.
	bytea, byteaArray bool
	// generated columns are computed by the target, never written.
	generated bool
}

const (
	oidBytea      = 17
	oidByteaArray = 1001
)

// loadTable reads the target table's columns and primary key; nil when it
// does not exist.
func loadTable(ctx context.Context, q querier, name qname) (*table, error) {
	var kind string
	err := q.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)`, name.sql()).Scan(&kind)
	if err == pgx.ErrNoRows {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up table %s: %w", name, err)
	}
	if kind != "r" && kind != "p" {
		return nil, fmt.Errorf("%s is not a table (relkind %s): mirror into a table", name, kind)
	}
	t := &table{name: name, cols: map[string]column{}}
	rows, err := q.Query(ctx, `SELECT attname, atttypid::int8, attgenerated <> '', attidentity = 'a'
		FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, name.sql())
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", name, err)
	}
	for rows.Next() {
		var c column
		var typ int64
		var always bool
		if err := rows.Scan(&c.name, &typ, &c.generated, &always); err != nil {
			return nil, fmt.Errorf("read the columns of %s: %w", name, err)
		}
		c.bytea, c.byteaArray = typ == oidBytea, typ == oidByteaArray
		t.identityAlways = t.identityAlways || always
		t.cols[c.name] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", name, err)
	}
	rows, err = q.Query(ctx, `SELECT a.attname FROM pg_index i
		CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE i.indrelid = to_regclass($1) AND i.indisprimary ORDER BY k.ord`, name.sql())
	if err != nil {
		return nil, fmt.Errorf("read the primary key of %s: %w", name, err)
	}
	t.pk, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read the primary key of %s: %w", name, err)
	}
	return t, nil
}

// createTable creates a mirror table the sink was not given: every column
// jsonb, which holds each value exactly as the envelope carries it (the
// sink sees JSON values, not the source's types), and the primary key on
// the event's key columns.
func createTable(ctx context.Context, q querier, name qname, cols, pk []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s (", name.sql())
	for _, c := range cols {
		fmt.Fprintf(&b, "%s jsonb, ", quoteIdent(c))
	}
	b.WriteString("PRIMARY KEY (")
	for i, c := range pk {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(quoteIdent(c))
	}
	b.WriteString("))")
	if err := ensureSchema(ctx, q, name.schema); err != nil {
		return err
	}
	if _, err := q.Exec(ctx, b.String()); err != nil {
		return fmt.Errorf("create table %s: %w", name, err)
	}
	return nil
}

// ensureSchema creates the schema when it does not exist. It looks first:
// CREATE SCHEMA IF NOT EXISTS wants CREATE on the database even when the
// schema is there, a privilege the sink's role need not have.
func ensureSchema(ctx context.Context, q querier, schema string) error {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
		return fmt.Errorf("look for schema %s: %w", schema, err)
	}
	if exists {
		return nil
	}
	if _, err := q.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+quoteIdent(schema)); err != nil {
		return fmt.Errorf("create schema %s: %w", schema, err)
	}
	return nil
}

// addColumns adds columns the source sends and the target lacks, as jsonb.
func addColumns(ctx context.Context, q querier, name qname, cols []string) error {
	for _, c := range cols {
		if _, err := q.Exec(ctx, fmt.Sprintf("ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s jsonb", name.sql(), quoteIdent(c))); err != nil {
			return fmt.Errorf("add column %s to %s: %w", c, name, err)
		}
	}
	return nil
}

// valueExpr is the SQL that turns member c of the JSON row e.v into the
// column's value; r is jsonb_populate_record's row, which already has every
// other type converted by the type's own input function.
func (c column) valueExpr() string {
	member := "e.v->" + quoteLiteral(c.name)
	switch {
	case c.bytea:
		return fmt.Sprintf("decode(e.v->>%s, 'base64')", quoteLiteral(c.name))
	case c.byteaArray:
		return fmt.Sprintf("CASE WHEN jsonb_typeof(%[1]s) = 'array' THEN ARRAY(SELECT decode(x, 'base64') FROM jsonb_array_elements_text(%[1]s) AS x) END", member)
	}
	return "r." + quoteIdent(c.name)
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// rowsFrom is the FROM clause that reads a JSON array of rows ($1) as rows
// of the table.
func (t *table) rowsFrom() string {
	return fmt.Sprintf("jsonb_array_elements($1::jsonb) AS e(v) CROSS JOIN LATERAL jsonb_populate_record(NULL::%s, e.v) AS r", t.name.sql())
}

// upsertSQL writes rows holding the columns cols: new rows are inserted,
// existing ones (by primary key) get those columns' values. Columns the
// event left out (unchanged TOASTed values) keep theirs.
func (t *table) upsertSQL(cols []string) string {
	var names, values, set []string
	for _, c := range cols {
		col := t.cols[c]
		if col.generated {
			continue
		}
		names = append(names, quoteIdent(c))
		values = append(values, col.valueExpr())
		if !slices.Contains(t.pk, c) {
			set = append(set, fmt.Sprintf("%[1]s = EXCLUDED.%[1]s", quoteIdent(c)))
		}
	}
	overriding := ""
	if t.identityAlways {
		overriding = " OVERRIDING SYSTEM VALUE"
	}
	pk := make([]string, len(t.pk))
	for i, c := range t.pk {
		pk[i] = quoteIdent(c)
	}
	action := "DO NOTHING"
	if len(set) > 0 {
		action = "DO UPDATE SET " + strings.Join(set, ", ")
	}
	return fmt.Sprintf("INSERT INTO %s AS t (%s)%s SELECT %s FROM %s ON CONFLICT (%s) %s",
		t.name.sql(), strings.Join(names, ", "), overriding, strings.Join(values, ", "), t.rowsFrom(), strings.Join(pk, ", "), action)
}

// deleteSQL deletes the rows whose primary key the JSON objects in $1 hold.
func (t *table) deleteSQL() string {
	var sel, match []string
	for _, c := range t.pk {
		sel = append(sel, fmt.Sprintf("%s AS %s", t.cols[c].valueExpr(), quoteIdent(c)))
		match = append(match, fmt.Sprintf("t.%[1]s = k.%[1]s", quoteIdent(c)))
	}
	return fmt.Sprintf("DELETE FROM %s AS t USING (SELECT %s FROM %s) AS k WHERE %s",
		t.name.sql(), strings.Join(sel, ", "), t.rowsFrom(), strings.Join(match, " AND "))
}
