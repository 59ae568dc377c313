package backfill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/source/decode"
)

// Table is a table as a backfill reads it.
type Table struct {
	Schema, Name string
	// Columns are the columns pgoutput publishes (not dropped, not
	// generated), in table order.
	Columns []decode.BackfillColumn
	// types are the columns' SQL types, for casting keys back from text.
	types []string
	// EventKey are the indexes of the event key's columns in the order live
	// events build the key: the replica identity's columns in table order,
	// or the primary key's in index order under REPLICA IDENTITY FULL.
	EventKey []int
	// PageKey are the same columns in the order of the index that serves
	// the keyset pagination.
	PageKey []int
	// publications are the pipeline's publications whose row filters
	// (PostgreSQL 15) decide which rows a chunk reads; none before
	// PostgreSQL 15 (Restrict sets them).
	publications []string
	// Partition, when not 0, restricts the backfill to the rows of the
	// root's partition with this oid (an ATTACHed partition's rows): they
	// are read through the table, so they carry its name, and a partition
	// detached meanwhile has no rows left to read.
	Partition uint32
}

// withPartition adds the partition restriction, if any, to filter (a
// boolean SQL expression, or "").
func (t Table) withPartition(filter string) string {
	if t.Partition == 0 {
		return filter
	}
	cond := fmt.Sprintf("tableoid = %d::oid", t.Partition)
	if filter == "" {
		return cond
	}
	return "(" + filter + ") AND " + cond
}

func (t Table) String() string { return t.Schema + "." + t.Name }

// SplitName splits "schema.table" ("table" means public.table).
func SplitName(name string) (schema, table string) {
	schema, table, ok := strings.Cut(name, ".")
	if !ok {
		return "public", name
	}
	return schema, table
}

// ErrKeyless is wrapped by Inspect for a table without a key to page on.
var ErrKeyless = errors.New("table has no key to read it by")

// Inspect describes a table for backfilling it.
func Inspect(ctx context.Context, db Querier, name string) (Table, error) {
	t := Table{}
	t.Schema, t.Name = SplitName(name)
	var ident string
	var oid uint32
	err := db.QueryRow(ctx, `SELECT c.oid, c.relreplident::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`, t.Schema, t.Name).Scan(&oid, &ident)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, fmt.Errorf("table %s does not exist in the source database", t)
	}
	if err != nil {
		return t, fmt.Errorf("inspect table %s: %w", t, err)
	}
	rows, err := db.Query(ctx, `SELECT attname, atttypid, atttypmod, format_type(atttypid, atttypmod), attnum FROM pg_attribute
WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped AND attgenerated = '' ORDER BY attnum`, oid)
	if err != nil {
		return t, fmt.Errorf("inspect columns of %s: %w", t, err)
	}
	attIndex := map[int16]int{}
	for rows.Next() {
		var c decode.BackfillColumn
		var typ string
		var num int16
		// The type modifier, as a Relation message carries it, so that
		// read events of a numeric(p,s) or timestamp(p) column have the
		// same debezium type as its live events.
		c.Typmod = new(int32)
		if err := rows.Scan(&c.Name, &c.Type, c.Typmod, &typ, &num); err != nil {
			rows.Close()
			return t, fmt.Errorf("inspect columns of %s: %w", t, err)
		}
		attIndex[num] = len(t.Columns)
		t.Columns = append(t.Columns, c)
		t.types = append(t.types, typ)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return t, fmt.Errorf("inspect columns of %s: %w", t, err)
	}
	// The index that identifies rows for live events: the replica
	// identity index, or the primary key (for default and full).
	cond := "i.indisprimary"
	if ident == "i" {
		cond = "i.indisreplident"
	}
	var keyAtts []int16
	err = db.QueryRow(ctx, `SELECT i.indkey::int2[] FROM pg_index i WHERE i.indrelid = $1 AND `+cond, oid).Scan(&keyAtts)
	if ident == "n" {
		return t, fmt.Errorf("%w: %s has REPLICA IDENTITY NOTHING, so its events carry no key to order a backfill's rows with (ALTER TABLE %s REPLICA IDENTITY DEFAULT, with a primary key)", ErrKeyless, t, pgx.Identifier{t.Schema, t.Name}.Sanitize())
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return t, fmt.Errorf("%w: %s has no primary key or replica identity index, and a backfill pages through a table by its key (add a primary key, or a unique index on NOT NULL columns and ALTER TABLE %s REPLICA IDENTITY USING INDEX it; REPLICA IDENTITY FULL alone is not enough)", ErrKeyless, t, pgx.Identifier{t.Schema, t.Name}.Sanitize())
	}
	if err != nil {
		return t, fmt.Errorf("inspect key of %s: %w", t, err)
	}
	for _, a := range keyAtts {
		i, ok := attIndex[a]
		if !ok {
			return t, fmt.Errorf("%w: the key of %s uses an expression or generated column", ErrKeyless, t)
		}
		t.PageKey = append(t.PageKey, i)
	}
	if ident == "f" {
		t.EventKey = append([]int(nil), t.PageKey...)
	} else {
		// pgoutput flags identity columns in table order.
		for i := range t.Columns {
			for _, k := range t.PageKey {
				if k == i {
					t.EventKey = append(t.EventKey, i)
				}
			}
		}
	}
	return t, nil
}

// Restrict narrows the table to what the pipeline's publications publish
// of it (PostgreSQL 15), the first being the pipeline's main publication
// and the others those the slot streams with it (the keyless one):
//
//   - the columns the main publication publishes (column lists, CREATE
//     PUBLICATION p FOR TABLE t (a, b)): pgoutput sends only those for
//     live changes, and a read event must carry no column the publication
//     hides. When the table is not in the publication every column stays.
//     A list that hides a key column is refused: read events carry the
//     key.
//   - the rows: every chunk applies the publications' row filters (FOR
//     TABLE t WHERE (...)) as they are when the chunk runs (rowFilterSQL).
//
// Before PostgreSQL 15 neither exists and the table stays whole.
func (t *Table) Restrict(ctx context.Context, db Querier, publications ...string) error {
	if len(publications) == 0 || publications[0] == "" {
		return nil
	}
	publication := publications[0]
	var version int
	if err := db.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return fmt.Errorf("read server version: %w", err)
	}
	if version < 150000 {
		return nil
	}
	for _, p := range publications {
		if p != "" {
			t.publications = append(t.publications, p)
		}
	}
	var names []string
	err := db.QueryRow(ctx, `SELECT attnames::text[] FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3`,
		publication, t.Schema, t.Name).Scan(&names)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the columns publication %s publishes of %s: %w", publication, t, err)
	}
	keep := make([]int, len(t.Columns)) // old index -> new index, or -1
	var cols []decode.BackfillColumn
	var types []string
	for i, c := range t.Columns {
		keep[i] = -1
		if slices.Contains(names, c.Name) {
			keep[i] = len(cols)
			cols = append(cols, c)
			types = append(types, t.types[i])
		}
	}
	remap := func(idx []int) ([]int, error) {
		out := make([]int, len(idx))
		for n, i := range idx {
			if keep[i] < 0 {
				return nil, fmt.Errorf("publication %s does not publish %s's key column %s, and a backfill's read events carry the key: add the column to the publication's column list", publication, t, t.Columns[i].Name)
			}
			out[n] = keep[i]
		}
		return out, nil
	}
	eventKey, err := remap(t.EventKey)
	if err != nil {
		return err
	}
	pageKey, err := remap(t.PageKey)
	if err != nil {
		return err
	}
	t.Columns, t.types, t.EventKey, t.PageKey = cols, types, eventKey, pageKey
	return nil
}

// rowFilterSQL reads, for the table's schema ($2) and name ($3), each
// publication among $1 that publishes it: whether it publishes inserts,
// and its row filter as PostgreSQL deparses it (pg_get_expr of the
// catalog's expression, NULL for none).
const rowFilterSQL = `SELECT p.pubinsert, pt.rowfilter FROM pg_publication_tables pt JOIN pg_publication p ON p.pubname = pt.pubname
WHERE pt.pubname = ANY($1) AND pt.schemaname = $2 AND pt.tablename = $3`

// pubFilter is one row of rowFilterSQL.
type pubFilter struct {
	Insert bool
	Filter *string
}

// rowFilter combines the publications' row filters the way pgoutput
// applies them to an INSERT, which is what a read is: a row is published
// when any publication that publishes the table's inserts has no filter or
// one the row satisfies. The result is a boolean SQL expression, or ""
// for every row. When no publication publishes the table's inserts, those
// that publish it at all decide (a read stands for the row's current
// state); when none publishes it, every row is read, as before row
// filters. The expressions are PostgreSQL's own deparsed catalog text,
// never built from anything else, and name the table's columns
// unqualified, which resolve to the table in the chunk's query.
func rowFilter(pubs []pubFilter) string {
	use := slices.DeleteFunc(slices.Clone(pubs), func(p pubFilter) bool { return !p.Insert })
	if len(use) == 0 {
		use = pubs
	}
	var parts []string
	for _, p := range use {
		if p.Filter == nil || strings.TrimSpace(*p.Filter) == "" {
			return ""
		}
		f := "(" + *p.Filter + ")"
		if !slices.Contains(parts, f) {
			parts = append(parts, f)
		}
	}
	switch len(parts) {
	case 0:
		return ""
	case 1:
		return parts[0]
	}
	return "(" + strings.Join(parts, " OR ") + ")"
}

// readRowFilter reads the rows filter (rowFilter) the publications apply
// now.
func (t Table) readRowFilter(ctx context.Context, db Querier) (string, error) {
	if len(t.publications) == 0 {
		return t.withPartition(""), nil
	}
	rows, err := db.Query(ctx, rowFilterSQL, t.publications, t.Schema, t.Name)
	if err != nil {
		return "", fmt.Errorf("read the row filters of %s: %w", t, err)
	}
	pubs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[pubFilter])
	if err != nil {
		return "", fmt.Errorf("read the row filters of %s: %w", t, err)
	}
	return t.withPartition(rowFilter(pubs)), nil
}
