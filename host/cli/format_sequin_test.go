package cli

import (
	"encoding/json"
	"maps"
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

// TestSequinWebhookMirror: a webhook sink with format = "sequin" through
// backfill reads, inserts, updates, a key change and deletes. A consumer
// written against Sequin's message reference (record, changes, action,
// metadata.idempotency_key) applies what arrived to a mirror that equals
// the table; the idempotency keys are the walcast ids.
func TestSequinWebhookMirror(t *testing.T) {
	parallel(t)
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`,
		`INSERT INTO items SELECT g, g, 'x' FROM generate_series(1, 30) g`)
	hook := &dbzHook{}
	url := serveLoopback(t, hook) + "/hooks"
	pipeline := writePipeline(t, "seqhook", dsn, []string{"public.items"}, sinkSpec{
		ID: "hook", URL: url, Top: "  format = \"sequin\"\n",
	})
	proc := startWalcast(t, pipeline)
	defer proc.stop()
	waitSlot(t, db, "walcast_seqhook")
	requestBackfill(t, db, pipeline, "--table", "public.items")
	exec1(t, db, `INSERT INTO items SELECT g, g, 'y' FROM generate_series(31, 40) g`)
	exec1(t, db, `UPDATE items SET v = v + 100 WHERE id BETWEEN 5 AND 35`)
	exec1(t, db, `UPDATE items SET id = id + 1000 WHERE id IN (7, 37)`)
	exec1(t, db, `DELETE FROM items WHERE id IN (8, 38, 1007)`)
	waitFor(t, "the backfill to finish", time.Minute, func() bool {
		var state string
		db.QueryRow(t.Context(), `SELECT state FROM walcast.backfills ORDER BY id DESC LIMIT 1`).Scan(&state)
		return state == "done"
	})
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	waitFor(t, "the slot to confirm everything", time.Minute, func() bool {
		return confirmedFlush(t, db, "walcast_seqhook") >= end
	})

	mirror := map[int]int{}
	seen := map[string]bool{}
	actions := map[string]int{}
	for _, raw := range hook.snapshot() {
		var m struct {
			Record   map[string]any `json:"record"`
			Changes  map[string]any `json:"changes"`
			Action   string         `json:"action"`
			Metadata struct {
				TableName      string `json:"table_name"`
				IdempotencyKey string `json:"idempotency_key"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(raw, &m); err != nil || m.Metadata.IdempotencyKey == "" || m.Metadata.TableName != "items" {
			t.Fatalf("not a Sequin message: %s (%v)", raw, err)
		}
		if _, err := pluginkit.ParseEventID(m.Metadata.IdempotencyKey); err != nil {
			t.Fatalf("idempotency_key %q is not a walcast id: %v", m.Metadata.IdempotencyKey, err)
		}
		if seen[m.Metadata.IdempotencyKey] {
			continue
		}
		seen[m.Metadata.IdempotencyKey] = true
		actions[m.Action]++
		id := int(m.Record["id"].(float64))
		switch m.Action {
		case "insert", "update", "read":
			if old, ok := m.Changes["id"]; ok {
				delete(mirror, int(old.(float64))) // the key changed (docs/formats.md)
			}
			mirror[id] = int(m.Record["v"].(float64))
		case "delete":
			delete(mirror, id)
		default:
			t.Fatalf("action %q: %s", m.Action, raw)
		}
	}
	if want := tableRows(t, db, "public.items"); !maps.Equal(mirror, want) {
		t.Errorf("mirror has %d rows, the table %d: %v", len(mirror), len(want), mirror)
	}
	if actions["read"] == 0 || actions["insert"] != 10 || actions["delete"] != 3 || actions["update"] != 33 {
		t.Errorf("actions %v: want reads, 10 inserts, 33 updates, 3 deletes", actions)
	}
	t.Logf("%d messages applied (%v); mirror equals the table", len(seen), actions)
}
