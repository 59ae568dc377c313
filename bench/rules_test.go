package bench

import (
	"strings"
	"testing"
)

// The rules table has a row per rules path that ran, its difference to
// the same path without rules, and nothing when no pair ran.
func TestRuleTable(t *testing.T) {
	path := func(name string, hostCPU, perChange float64) PathResult {
		return PathResult{Name: name, Median: Drain{HostCPU: hostCPU, CPUPerChange: perChange}}
	}
	r := &Results{Workload: Workload{Changes: 1_000_000}, Paths: []PathResult{
		path(PathLibrary, 2, 2), path(PathLibraryRules, 2.5, 2.5),
		path(PathStdout, 5, 8), path(PathStdoutFilter, 5.25, 8.5), path(PathStdoutTransform, 6, 9), path(PathWebhook1000, 7, 10), path(PathWebhookRules, 8, 12),
	}}
	var b strings.Builder
	r.writeRuleTable(&b)
	for _, want := range []string{
		"| daemon-stdout | none | 5.00 | – | 8.00 | – |",
		"| daemon-stdout-filter | filter | 5.25 | +0.25 | 8.50 | +0.50 |",
		"| daemon-stdout-transform | transform: drop, mask (sha256), rename | 6.00 | +1.00 | 9.00 | +1.00 |",
		"| daemon-webhook-1000 | none | 7.00 | – | 10.00 | – |",
		"| daemon-webhook-rules | all three | 8.00 | +1.00 | 12.00 | +2.00 |",
		"| library-rules | filter and transform | 2.50 | +0.50 | – | – |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no row %q in\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), PathWebhookRoute) {
		t.Errorf("a path that did not run has a row:\n%s", b.String())
	}
	b.Reset()
	(&Results{Workload: Workload{Changes: 10}, Paths: []PathResult{path(PathStdoutFilter, 1, 1)}}).writeRuleTable(&b)
	if b.Len() != 0 {
		t.Errorf("a table without daemon-stdout:\n%s", b.String())
	}
}
