package cli

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// TestExpressionErrorParksAndReplays: a filter that fails on one row (a
// division by zero) parks that row's events only, with the expression's
// error, while the other rows are delivered or filtered; after the file is
// fixed, `walcast replay` (which reads the file) delivers them,
// transformed like every other event.
func TestExpressionErrorParksAndReplays(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, d int NOT NULL, email text NOT NULL)`)
	rcv := newReceiver(t)
	top := "  filter = \"100 / new.d > 1\"\n  transform {\n    mask = { email = \"sha256\" }\n  }\n"
	pipeline := writePipeline(t, "exprpark", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL, Top: top})
	proc := startCapturing(t, db, pipeline)
	exec1(t, db, `INSERT INTO items VALUES (1, 10, 'one@example.com'), (2, 0, 'two@example.com'), (3, 200, 'three@example.com')`)
	exec1(t, db, `UPDATE items SET email = 'two2@example.com' WHERE id = 2`)
	exec1(t, db, `UPDATE items SET d = 20 WHERE id = 1`)
	waitFor(t, "row 2's two events parked", time.Minute, func() bool { return parkedCount(db, "exprpark") == 2 })
	waitFor(t, "row 1's two events", time.Minute, func() bool { return rcv.distinct() == 2 })
	var lastErr string
	if err := db.QueryRow(ctx, `SELECT last_error FROM walcast.parked ORDER BY commit_lsn, idx LIMIT 1`).Scan(&lastErr); err != nil ||
		!strings.Contains(lastErr, "filter") || !strings.Contains(lastErr, "division by zero") {
		t.Fatalf("parked with %q (%v), want the filter's division by zero", lastErr, err)
	}
	proc.stop()

	src, err := os.ReadFile(pipeline)
	if err != nil {
		t.Fatal(err)
	}
	fixed := strings.Replace(string(src), `"100 / new.d > 1"`, `"new.d == 0 || 100 / new.d > 1"`, 1)
	if err := os.WriteFile(pipeline, []byte(fixed), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := walcastCLI(t, "replay", pipeline, "--sink", "hook", "--all", "--plugin-dir", binDir)
	if err != nil || !strings.Contains(out, "2 delivered") {
		t.Fatalf("replay after the fix: %v\n%s", err, out)
	}
	got := rcv.events()
	if len(got) != 4 || got[2].Key != `{"id":2}` || got[3].Key != `{"id":2}` || got[2].ID.Compare(got[3].ID) >= 0 {
		t.Fatalf("after the replay: %d events %+v", len(got), got)
	}
	for _, e := range got {
		if strings.Contains(string(e.Raw), "@example.com") || strings.Contains(string(e.Raw), `"id":3`) {
			t.Fatalf("a masked value or a filtered row reached the sink: %s", e.Raw)
		}
	}
}
