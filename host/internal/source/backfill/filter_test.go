package backfill

import "testing"

// TestRowFilterCombines follows pgoutput's rule for a table several
// publications publish: a row inserted is published when any publication
// that publishes the table's inserts has no filter or one the row
// satisfies.
func TestRowFilterCombines(t *testing.T) {
	f := func(s string) *string { return &s }
	for _, tc := range []struct {
		name string
		pubs []pubFilter
		want string
	}{
		{"not published", nil, ""},
		{"no filter", []pubFilter{{Insert: true}}, ""},
		{"one filter", []pubFilter{{Insert: true, Filter: f("(id > 1)")}}, "((id > 1))"},
		{"any of two", []pubFilter{{Insert: true, Filter: f("(id > 1)")}, {Insert: true, Filter: f("(v = 2)")}}, "(((id > 1)) OR ((v = 2)))"},
		{"same twice", []pubFilter{{Insert: true, Filter: f("(id > 1)")}, {Insert: true, Filter: f("(id > 1)")}}, "((id > 1))"},
		{"one without a filter publishes every row", []pubFilter{{Insert: true, Filter: f("(id > 1)")}, {Insert: true}}, ""},
		{"a publication without inserts does not count", []pubFilter{{Insert: true, Filter: f("(id > 1)")}, {Insert: false}}, "((id > 1))"},
		{"only publications without inserts", []pubFilter{{Insert: false, Filter: f("(id > 1)")}}, "((id > 1))"},
	} {
		if got := rowFilter(tc.pubs); got != tc.want {
			t.Errorf("%s: rowFilter = %q, want %q", tc.name, got, tc.want)
		}
	}
}
