package cli

import (
	"strings"
	"testing"

	"github.com/walcast/walcast/host/internal/config"
)

// TestPlanServerVersion: walcast validate --source refuses, on the
// server's line, a messages block (and backfill_new_tables) on a server
// older than PostgreSQL 14, as walcast run does, and accepts them on 14
// and later. The test machine runs PostgreSQL 15 only: the version is
// injected at the seam that takes it.
func TestPlanServerVersion(t *testing.T) {
	p := &config.Pipeline{Name: "msgs"}
	p.Source.Messages.Prefixes = []string{"app."}
	for _, tc := range []struct {
		version string
		refused bool
	}{{"13.11", true}, {"12.20 (Debian 12.20-1)", true}, {"14.0", false}, {"15.18", false}} {
		var pl plan
		pl.add(markOK, "server", "PostgreSQL %s", tc.version)
		planServerVersion(&pl, p, tc.version)
		text := pl.lines[0].mark + " " + pl.lines[0].text
		if got := pl.refusals() == 1; got != tc.refused {
			t.Errorf("PostgreSQL %s with a messages block: refused %v, want %v: %s", tc.version, got, tc.refused, text)
		}
		if tc.refused && (!strings.Contains(text, "messages block needs PostgreSQL 14 or later") || !strings.Contains(text, "the source runs "+tc.version)) {
			t.Errorf("PostgreSQL %s: the refusal does not say why: %s", tc.version, text)
		}
	}
	// Without the block, an old server is no reason to refuse.
	var pl plan
	pl.add(markOK, "server", "PostgreSQL 13.11")
	planServerVersion(&pl, &config.Pipeline{Name: "plain"}, "13.11")
	if pl.refusals() != 0 {
		t.Errorf("a pipeline without a messages block refused on PostgreSQL 13: %+v", pl.lines)
	}
}
