package cli

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// walcast run refuses a route on a sink whose plugin does not declare
// routes (stdout: one destination) before it delivers anything, at the
// route's file, line and column, as walcast validate does
// (testdata/validate/route_unsupported.txtar).
func TestRunRefusesUnsupportedRoute(t *testing.T) {
	parallel(t)
	dsn, _ := newSource(t, `CREATE TABLE items (id int PRIMARY KEY)`)
	pipeline := writePipeline(t, "routerefused", dsn, []string{"public.items"},
		sinkSpec{ID: "debug", SinkType: "stdout", Top: "  route = \"table\"\n", Config: "    path = \"events.jsonl\"\n"})
	src, err := os.ReadFile(pipeline)
	if err != nil {
		t.Fatal(err)
	}
	var at string
	for i, l := range strings.Split(string(src), "\n") {
		if c := strings.Index(l, `"table"`); strings.Contains(l, "route") && c >= 0 {
			at = fmt.Sprintf("%s:%d:%d: error: Route not supported: Sink \"debug\": the stdout plugin", pipeline, i+1, c+1)
		}
	}
	if at == "" {
		t.Fatalf("no route in the pipeline file:\n%s", src)
	}
	if out := runOnce(t, pipeline); !strings.Contains(out, at) {
		t.Fatalf("walcast run's output does not contain %q:\n%s", at, out)
	}
}
