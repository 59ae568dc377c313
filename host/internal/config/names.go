package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/walcast/walcast/host/internal/pg"
	"github.com/walcast/walcast/pluginkit"
)

// Each check below returns "" for a good value, or the end of a sentence
// that starts with the value ("... %q " + problem), or a whole sentence
// for table names.

// checkSlotName: see pg.SlotProblem.
func checkSlotName(name string) string { return pg.SlotProblem(name) }

// checkSinkID: ids appear in metrics labels, Kafka transactional ids and
// checkpoint rows, so they stay in a charset every one of those accepts.
func checkSinkID(id string) string {
	if id == "" {
		return "is empty"
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return fmt.Sprintf("contains %q; use only letters, digits, '_' and '-'", r)
		}
	}
	return ""
}

// checkSinkType: the type names an executable, walcast-sink-<type>, so it
// must not be able to name a path (pluginkit.ValidTypeName).
func checkSinkType(typ string) string {
	switch {
	case typ == "":
		return "is empty"
	case !pluginkit.ValidTypeName(typ):
		return "is not a plugin type: plugin types use lower-case letters, digits, '_' and '-', start with a letter or digit, and are at most 64 characters long"
	}
	return ""
}

// checkTableName requires "schema.table". Unqualified names are refused
// rather than read as public.<name>: PostgreSQL resolves them through the
// search_path, and a publication silently covering another schema's table
// is worse than a startup error. Names are compared with the catalog as
// written, so quotes are refused too.
func checkTableName(t string) string {
	if strings.ContainsAny(t, "*?") {
		return fmt.Sprintf("Table %q contains a wildcard; list every table to capture by name.", t)
	}
	if strings.ContainsAny(t, "\"\t\r\n") {
		return fmt.Sprintf(`Table %q contains quotes or control characters; write schema.table as spelled in the catalog, without quotes.`, t)
	}
	schema, table, ok := strings.Cut(t, ".")
	if !ok {
		return fmt.Sprintf("Table %q must be schema-qualified, as in %q.", t, "public."+t)
	}
	// A space inside a name is legal (CREATE TABLE "order items"); one at
	// either end of the schema or the table is almost always a typo.
	if strings.TrimSpace(schema) != schema || strings.TrimSpace(table) != table {
		return fmt.Sprintf(`Table %q has a space at the start or end of its schema or table name; write schema.table as spelled in the catalog.`, t)
	}
	if schema == "" || table == "" || strings.Contains(table, ".") {
		return fmt.Sprintf(`Table %q is not of the form "schema.table".`, t)
	}
	if schema == pg.ControlSchema {
		return fmt.Sprintf("Table %q is in the walcast schema, which holds walcast's own state: the walcast schema is never captured.", t)
	}
	return ""
}

// decodeStringList decodes a list of strings and returns where each element
// was written, so that a bad element is pointed at rather than the whole
// list. An expression that is not a literal list (a function call, say)
// gives every element the range of the whole expression. ok is false when
// anything failed to decode (and is already reported).
func (d *decoder) decodeStringList(attr *hcl.Attribute) (vals []string, ranges []hcl.Range, ok bool) {
	exprs, diags := hcl.ExprList(attr.Expr)
	if diags.HasErrors() {
		if !d.decodeAttr(attr, &vals) {
			return nil, nil, false
		}
		ranges = make([]hcl.Range, len(vals))
		for i := range ranges {
			ranges[i] = attr.Expr.Range()
		}
		return vals, ranges, true
	}
	ok = true
	for _, e := range exprs {
		var v string
		if !d.decodeAttr(&hcl.Attribute{Name: attr.Name, Expr: e}, &v) {
			ok = false
			continue
		}
		vals = append(vals, v)
		ranges = append(ranges, e.Range())
	}
	return vals, ranges, ok
}

// decodeDuration decodes a duration written as a string such as "30s".
func (d *decoder) decodeDuration(attr *hcl.Attribute) (time.Duration, bool) {
	var s string
	if !d.decodeAttr(attr, &s) {
		return 0, false
	}
	dur, diag := parseDuration(s, attr.Expr.Range())
	if diag != nil {
		d.add(diag)
		return 0, false
	}
	return dur, true
}

// parseDuration is time.ParseDuration with a diagnostic at rng.
func parseDuration(s string, rng hcl.Range) (time.Duration, *hcl.Diagnostic) {
	dur, err := time.ParseDuration(s)
	if err != nil {
		return 0, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid duration",
			Detail: fmt.Sprintf(`bad duration %q: %s; write a number and a unit, such as "30s", "2m" or "1h30m".`,
				s, strings.TrimPrefix(err.Error(), "time: ")),
			Subject: rng.Ptr(),
		}
	}
	return dur, nil
}
