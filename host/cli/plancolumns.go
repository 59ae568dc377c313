package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/config"
)

// planColumns adds a refusal for each column a sink's filter, route or
// transform names that none of the sink's tables has: a typo in a column
// name would otherwise be an error on every event (parked) or a transform
// that silently does nothing. Each names the place in the file.
func planColumns(ctx context.Context, pl *plan, p *config.Pipeline, pool *pgxpool.Pool) error {
	var named bool
	for i := range p.Sinks {
		named = named || !p.Sinks[i].Rules.Empty()
	}
	if !named {
		return nil
	}
	columns, err := tableColumns(ctx, pool, p.Source.Tables)
	if err != nil {
		return err
	}
	for i := range p.Sinks {
		s := &p.Sinks[i]
		if s.Rules.Compiled == nil && len(s.Rules.Spec.TransformColumns()) == 0 {
			continue
		}
		tables := config.SinkTables(&p.Source, s)
		var named []ruleColumn
		if s.Rules.Compiled != nil {
			for _, c := range s.Rules.Compiled.Columns() {
				named = append(named, ruleColumn{where: c.Where, text: c.Var + "." + c.Name, name: c.Name, line: c.Line, col: c.Column})
			}
		}
		for _, c := range s.Rules.Spec.TransformColumns() {
			named = append(named, ruleColumn{where: c.Where, text: c.Where, name: c.Name})
		}
		for _, c := range named {
			if slices.ContainsFunc(tables, func(t string) bool { return slices.Contains(columns[t], c.name) }) {
				continue
			}
			at := s.Rules.Place(c.where, s.DeclRange).At(c.line, c.col)
			pl.refuse("", fmt.Sprintf("%s:%d:%d: sink %q: %s names column %q, which none of its tables has (%s): a typo?",
				at.Filename, at.Start.Line, at.Start.Column, s.ID, c.text, c.name, strings.Join(tables, ", ")))
		}
	}
	return nil
}

type ruleColumn struct {
	where, text, name string
	line, col         int
}

// tableColumns reads the columns of each table ("schema.table").
func tableColumns(ctx context.Context, pool *pgxpool.Pool, tables []string) (map[string][]string, error) {
	rows, err := pool.Query(ctx, `SELECT n.nspname || '.' || c.relname, a.attname
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname || '.' || c.relname = ANY($1) AND a.attnum > 0 AND NOT a.attisdropped`, tables)
	if err != nil {
		return nil, fmt.Errorf("read the columns of the source tables: %w", err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var t, c string
		if err := rows.Scan(&t, &c); err != nil {
			return nil, fmt.Errorf("read the columns of the source tables: %w", err)
		}
		out[t] = append(out[t], c)
	}
	return out, rows.Err()
}
