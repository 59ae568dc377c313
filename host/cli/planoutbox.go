package cli

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/config"
)

// planOutbox adds a refusal for each outbox block whose table does not
// exist, or lacks a column the block names (by default or by hand), or
// whose payload column is of a type the outbox cannot send as it is.
// Each names the place in the file.
func planOutbox(ctx context.Context, pl *plan, p *config.Pipeline, pool *pgxpool.Pool) error {
	for i := range p.Sinks {
		s := &p.Sinks[i]
		o := s.Outbox
		if o == nil || o.Table == "" {
			continue
		}
		columns, found, err := outboxColumns(ctx, pool, o.Table)
		if err != nil {
			return err
		}
		if !found {
			at := o.Places["table"]
			pl.refuse("", fmt.Sprintf("%s:%d:%d: sink %q: the outbox table %s does not exist",
				at.Filename, at.Start.Line, at.Start.Column, s.ID, o.Table))
			continue
		}
		for _, c := range o.Columns() {
			typ, ok := columns[c[1]]
			at := o.Places[c[0]]
			switch {
			case !ok:
				pl.refuse("", fmt.Sprintf("%s:%d:%d: sink %q: the outbox table %s has no column %q (%s)",
					at.Filename, at.Start.Line, at.Start.Column, s.ID, o.Table, c[1], c[0]))
			case c[0] == "payload_column" && !typ.sendable():
				pl.refuse("", fmt.Sprintf("%s:%d:%d: sink %q: the outbox payload column %s.%s is of type %s: the outbox sends json, jsonb and text-like columns as they are; change its type",
					at.Filename, at.Start.Line, at.Start.Column, s.ID, o.Table, c[1], typ.name))
			}
		}
	}
	return nil
}

type columnType struct {
	name     string // pg_type.typname
	category string // pg_type.typcategory: "S" for string types
}

// sendable reports whether an outbox payload of this type is sent as it
// is: a json/jsonb document, or a string's content.
func (t columnType) sendable() bool {
	return t.name == "json" || t.name == "jsonb" || t.category == "S"
}

// outboxColumns reads the columns of table ("schema.table") and their
// types; found is false when there is no such table.
func outboxColumns(ctx context.Context, pool *pgxpool.Pool, table string) (map[string]columnType, bool, error) {
	rows, err := pool.Query(ctx, `SELECT a.attname, t.typname, t.typcategory::text
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_type t ON t.oid = a.atttypid
WHERE n.nspname || '.' || c.relname = $1`, table)
	if err != nil {
		return nil, false, fmt.Errorf("read the columns of the outbox table %s: %w", table, err)
	}
	defer rows.Close()
	out := map[string]columnType{}
	found := false
	for rows.Next() {
		var name, typ, cat *string
		if err := rows.Scan(&name, &typ, &cat); err != nil {
			return nil, false, fmt.Errorf("read the columns of the outbox table %s: %w", table, err)
		}
		found = true
		if name != nil && typ != nil && cat != nil {
			out[*name] = columnType{name: *typ, category: *cat}
		}
	}
	return out, found, rows.Err()
}
