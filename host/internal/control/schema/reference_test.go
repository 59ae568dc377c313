package schema_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

const schemaPage = "../../../../docs/reference/schema.md"

// TestSchemaReference checks docs/reference/schema.md against the walcast
// schema as Migrate leaves it in a real database: every table is on the
// page, the page names no table that does not exist, and every column a
// table's entry lists is one of its columns.
func TestSchemaReference(t *testing.T) {
	pool := migrated(t)
	ctx := context.Background()
	rows, _ := pool.Query(ctx, `SELECT table_name::text, column_name::text FROM information_schema.columns WHERE table_schema = 'walcast'`)
	columns := map[string]map[string]bool{}
	var table, column string
	if _, err := pgx.ForEachRow(rows, []any{&table, &column}, func() error {
		if columns[table] == nil {
			columns[table] = map[string]bool{}
		}
		columns[table][column] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(schemaPage)
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, m := range tableName.FindAllStringSubmatch(string(page), -1) {
		named[m[1]] = true
		if columns[m[1]] == nil {
			t.Errorf("%s names walcast.%s, which Migrate does not create", schemaPage, m[1])
		}
	}
	for table := range columns {
		if !named[table] {
			t.Errorf("%s does not describe walcast.%s", schemaPage, table)
		}
	}
	// An entry: "- `walcast.t` (`a`, `b`, …): what it holds".
	for _, m := range tableEntry.FindAllStringSubmatch(string(page), -1) {
		for _, c := range codeSpan.FindAllStringSubmatch(m[2], -1) {
			if cols := columns[m[1]]; cols != nil && !cols[c[1]] && !strings.Contains(c[1], " ") {
				t.Errorf("%s: walcast.%s has no column %s", schemaPage, m[1], c[1])
			}
		}
	}
	if len(columns) < 10 {
		t.Fatalf("found %d tables in the walcast schema", len(columns))
	}
}

var (
	tableName  = regexp.MustCompile("`walcast\\.([a-z_]+)`")
	tableEntry = regexp.MustCompile("(?m)^- `walcast\\.([a-z_]+)` \\(([^)]*)\\)")
	codeSpan   = regexp.MustCompile("`([^`]*)`")
)
