package daemon

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const (
	alertRules = "../../../examples/prometheus/walcast-alerts.yml"
	alertTests = "../../../examples/prometheus/walcast-alerts_test.yml"
)

// needPromtool returns the path of promtool (Debian's prometheus package).
// In CI (CI=true) a missing one fails the test: `make tools` installs it.
func needPromtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not found in CI: the Makefile's tools target installs it (apt-get install -y prometheus)")
		}
		t.Skip("promtool not found: run `make tools` (apt-get install -y prometheus) to test the alert rules")
	}
	return p
}

// TestAlertRules: the alert rules in docs/monitoring.md are the file the promtool rule
// tests run against, they are valid, and they behave as the tests say: quiet
// on a healthy pipeline of a busy cluster, firing on a stuck sink, a slot
// retaining WAL, parked events and a stream that is down.
func TestAlertRules(t *testing.T) {
	rules, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile("../../../docs/monitoring.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "```yaml\n"+string(rules)+"```\n") {
		t.Errorf("docs/monitoring.md does not show %s verbatim in a yaml block: copy the file into the Alerts section", alertRules)
	}
	reference, err := os.ReadFile("../../../docs/reference/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	// Every metric the rules use exists (the names are checked against a
	// real scrape in cmd/walcast's TestMetrics through this list).
	for _, name := range ruleMetrics(t) {
		if !strings.Contains(string(reference), "`"+name+"`") {
			t.Errorf("metric %s used by the alert rules is not in docs/reference/metrics.md", name)
		}
	}

	promtool := needPromtool(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for _, args := range [][]string{{"check", "rules", filepath.Base(alertRules)}, {"test", "rules", filepath.Base(alertTests)}} {
		cmd := exec.CommandContext(ctx, promtool, args...)
		cmd.Dir = filepath.Dir(alertRules)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// ruleMetrics returns the walcast metric names the alert rules use.
func ruleMetrics(t *testing.T) []string {
	t.Helper()
	rules, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var out []string
	for _, line := range strings.Split(string(rules), "\n") {
		expr, ok := strings.CutPrefix(strings.TrimSpace(line), "expr:")
		if !ok {
			continue
		}
		for _, m := range regexp.MustCompile(`walcast_[a-z_]+`).FindAllString(expr, -1) {
			if !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no walcast metric found in the alert rules")
	}
	return out
}
