package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestOnGapResyncHealsEachGap: with on_gap = "resync", each way a gap
// arises while walcast is stopped, besides the dropped slot
// (TestOnGapResyncLostSlot) and the failover (TestOnGapResyncFailover),
// ends in the same healing with no flag: the slot moved by hand (advanced
// past changes, or dropped and created again by hand), and the
// publication dropped and created again by hand (the slot is replaced). Rows are deleted, updated and inserted in
// the gap; the start records the gap (walcast status names its kind),
// resyncs the table, and a consumer keeping the marker contract ends
// equal to the table, the gap's deleted rows swept. Beforehand walcast
// status --json (checked against its schema) says the next run heals
// (refusal.heals_on_next_run) and exits 0.
func TestOnGapResyncHealsEachGap(t *testing.T) {
	parallel(t)
	// before runs before the gap's changes, after once they committed.
	for _, c := range []struct{ name, before, after, kind string }{
		{"gapadvanced", "", `SELECT pg_replication_slot_advance('walcast_%[1]s', pg_current_wal_lsn())`, "slot moved"},
		{"gaprecreated", "", `SELECT pg_drop_replication_slot('walcast_%[1]s'), pg_create_logical_replication_slot('walcast_%[1]s', 'pgoutput')`, "slot moved"},
		// The slot cannot decode with a publication created after its
		// position: it must be replaced, not kept.
		{"gappub", "DROP PUBLICATION walcast_%[1]s", "CREATE PUBLICATION walcast_%[1]s FOR TABLE items", "publication recreated"},
	} {
		t.Run(c.name, func(t *testing.T) {
			parallel(t)
			dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
			rcv := newReceiver(t)
			p := writePipeline(t, c.name, dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL})
			setSourceAttr(t, p, `on_gap = "resync"`)
			proc := startCapturing(t, db, p)
			exec1(t, db, `INSERT INTO items SELECT g, 0, 'p' FROM generate_series(1, 200) g`)
			waitConfirmed(t, db, c.name, time.Minute)
			proc.stop()

			// The gap: these changes never reach walcast's stream.
			if c.before != "" {
				exec1(t, db, fmt.Sprintf(c.before, c.name))
			}
			exec1(t, db, `DELETE FROM items WHERE id % 4 = 0`)
			exec1(t, db, `UPDATE items SET v = 5 WHERE id % 4 = 1`)
			exec1(t, db, `INSERT INTO items SELECT g, 0, 'gap' FROM generate_series(201, 250) g`)
			exec1(t, db, fmt.Sprintf(c.after, c.name))

			// walcast status --json says the next run heals, and exits 0.
			out, code := statusJSONOf(t, p)
			var doc map[string]any
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatalf("walcast status --json: %v\n%s", err, out)
			}
			if exec.Command("/usr/bin/python3", "-c", "import jsonschema").Run() == nil {
				validateStatusJSON(t, "/usr/bin/python3", out) // where the validator is installed (make tools)
			}
			refusal, _ := doc["refusal"].(map[string]any)
			if code != 0 || refusal == nil || refusal["heals_on_next_run"] != true || refusal["kind"] != c.kind {
				t.Fatalf("walcast status --json before the healing run: exit %d, refusal %v; want 0 and a %s that heals_on_next_run:\n%s", code, refusal, c.kind, out)
			}

			proc = startWalcast(t, p)
			var id int64
			waitFor(t, "a resync queued by the start", time.Minute, func() bool {
				return db.QueryRow(context.Background(), `SELECT id FROM walcast.backfills WHERE pipeline = $1 AND resync`, c.name).Scan(&id) == nil
			})
			waitFor(t, "the resync to finish", time.Minute, func() bool { s, _, _ := backfillState(t, db, id); return s == "done" })
			waitFor(t, fmt.Sprintf("resync %d's resync_end to reach sink hook", id), time.Minute, func() bool {
				return hasMarker(rcv.events(), "resync_end", id)
			})
			exec1(t, db, `UPDATE items SET v = 7 WHERE id % 4 = 2`)
			waitConfirmed(t, db, c.name, time.Minute)
			status, _ := walcastOut(t, "status", p)
			proc.stop()
			wantAll(t, status, "gap accepted", "("+c.kind+")", "resync done")

			m := newResyncMirror([]string{"id"}, true).applyAll(t, rcv.events())
			if d := m.diff(t, db, "items"); len(d) > 0 {
				t.Fatalf("the copy kept with the marker contract differs from the table in %d rows, e.g. %s", len(d), d[0])
			}
			if m.swept != 50 {
				t.Fatalf("%d rows swept at resync_end, want the 50 deleted in the gap", m.swept)
			}
			if strings.Contains(status, "refuses to start") {
				t.Fatalf("walcast status after the healing still says it refuses:\n%s", status)
			}
		})
	}
}
