package config

import (
	"fmt"
	"testing"

	"github.com/hashicorp/hcl/v2"
)

func TestFormatDiagnostics(t *testing.T) {
	at := func(file string, line, col int) *hcl.Range {
		return &hcl.Range{Filename: file, Start: hcl.Pos{Line: line, Column: col}, End: hcl.Pos{Line: line, Column: col + 1}}
	}
	diags := hcl.Diagnostics{
		{Severity: hcl.DiagError, Summary: "Third", Detail: "two\nlines", Subject: at("b.hcl", 1, 1)},
		{Severity: hcl.DiagWarning, Summary: "Second", Subject: at("a.hcl", 10, 2)},
		{Severity: hcl.DiagError, Summary: "First", Detail: "same place, kept in order", Subject: at("a.hcl", 2, 5)},
		{Severity: hcl.DiagError, Summary: "First bis", Subject: at("a.hcl", 2, 5)},
		{Severity: hcl.DiagError, Summary: "Cannot read pipeline file", Detail: "open x.hcl: permission denied"},
	}
	want := `error: Cannot read pipeline file: open x.hcl: permission denied
a.hcl:2:5: error: First: same place, kept in order
a.hcl:2:5: error: First bis
a.hcl:10:2: warning: Second
b.hcl:1:1: error: Third: two lines
`
	if got := FormatDiagnostics(diags); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if got := FormatDiagnostics(nil); got != "" {
		t.Errorf("no diagnostics: got %q", got)
	}
}

func ExampleFormatDiagnostics() {
	src := []byte(`pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["orders"]
}

sink "webhook" "billing" {
  delivery {
    retry_base = "30"
  }
}
`)
	_, diags := Parse(src, "shop.hcl")
	fmt.Print(FormatDiagnostics(diags))
	// Output:
	// shop.hcl:5:13: error: Invalid table name: Table "orders" must be schema-qualified, as in "public.orders".
	// shop.hcl:10:18: error: Invalid duration: bad duration "30": missing unit in duration "30"; write a number and a unit, such as "30s", "2m" or "1h30m".
}
