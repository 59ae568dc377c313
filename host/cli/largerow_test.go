package cli

import (
	"fmt"
	"testing"
	"time"
)

// TestLargeRows: rows of 3 MB go through the queue, the scheduler's byte
// bounds and 16 MiB batches to the webhook, every one of them, whole.
func TestLargeRows(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE docs (id int PRIMARY KEY, body text NOT NULL)`)
	exec1(t, db, `ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL`) // no compression: 3 MB in the WAL
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "large", dsn, []string{"public.docs"}, sinkSpec{ID: "hook", URL: rcv.URL,
		// A 3 MB body through a race-enabled receiver on a loaded machine
		// can take longer than the harness's 5 s: this test is about
		// sizes, not timeouts.
		Config: fmt.Sprintf("    url = %q\n    timeout = \"60s\"\n", rcv.URL)})
	proc := startCapturing(t, db, pipeline)
	exec1(t, db, `INSERT INTO docs SELECT g, repeat(md5(g::text), 3 * 1024 * 1024 / 32) FROM generate_series(1, 12) g`)
	waitFor(t, "12 rows of 3 MB", 2*time.Minute, func() bool { return rcv.distinct() == 12 })
	proc.stop()
	for _, e := range rcv.events() {
		if len(e.Raw) < 3<<20 {
			t.Fatalf("event %s arrived with %d bytes, want the whole 3 MB row", e.ID, len(e.Raw))
		}
	}
}
