package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// FormatDiagnostics renders diags one per line, as compilers do, so that
// editors and CI logs can jump to each problem:
//
//	FILE:LINE:COL: error: SUMMARY: DETAIL
//
// Warnings say "warning". Lines are sorted by file, line and column (stable
// for problems at the same place); a diagnostic without a position, such
// as an unreadable file, comes first without the FILE:LINE:COL prefix.
// The result is empty when there is nothing to report.
func FormatDiagnostics(diags hcl.Diagnostics) string {
	sorted := slices.Clone(diags)
	slices.SortStableFunc(sorted, func(a, b *hcl.Diagnostic) int {
		ra, rb := subjectOf(a), subjectOf(b)
		return cmp.Or(
			cmp.Compare(ra.Filename, rb.Filename),
			cmp.Compare(ra.Start.Line, rb.Start.Line),
			cmp.Compare(ra.Start.Column, rb.Start.Column),
		)
	})

	var b strings.Builder
	for _, d := range sorted {
		if d.Subject != nil {
			fmt.Fprintf(&b, "%s:%d:%d: ", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column)
		}
		b.WriteString(severityName(d.Severity))
		b.WriteString(": ")
		b.WriteString(oneLine(d.Summary))
		if d.Detail != "" {
			b.WriteString(": ")
			b.WriteString(oneLine(d.Detail))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func subjectOf(d *hcl.Diagnostic) hcl.Range {
	if d.Subject == nil {
		return hcl.Range{}
	}
	return *d.Subject
}

func severityName(s hcl.DiagnosticSeverity) string {
	if s == hcl.DiagWarning {
		return "warning"
	}
	return "error"
}

// oneLine folds the occasional multi-line HCL detail so that each problem
// stays on one line.
func oneLine(s string) string {
	return strings.TrimSpace(strings.ReplaceAll(s, "\n", " "))
}
