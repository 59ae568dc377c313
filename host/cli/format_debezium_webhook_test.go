package cli

import (
	"encoding/json"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// dbzHook is a webhook endpoint that keeps the Debezium events of every
// batch it is sent, in arrival order.
type dbzHook struct {
	mu     sync.Mutex
	events []json.RawMessage
	fail   atomic.Bool // answer 500 and keep nothing
}

func (h *dbzHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.fail.Load() {
		http.Error(w, "down", http.StatusInternalServerError)
		return
	}
	body, err := io.ReadAll(r.Body)
	var batch struct {
		Events []json.RawMessage `json:"events"`
	}
	if err != nil || json.Unmarshal(body, &batch) != nil {
		http.Error(w, "bad batch", http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	h.events = append(h.events, batch.Events...)
	h.mu.Unlock()
}

func (h *dbzHook) snapshot() []json.RawMessage {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]json.RawMessage(nil), h.events...)
}

// TestDebeziumWebhookMirror runs a pipeline whose webhook sink has
// format = "debezium" through every kind of change: a backfill of rows
// that existed before, inserts, updates (one leaving a TOASTed column
// unchanged), an update that changes the key, deletes and a TRUNCATE.
// A consumer written against Debezium's documented event shape (plus
// the documented key-change difference) applies what arrived to a mirror
// that must equal the table; each event is named by source.lsn and
// transaction.total_order exactly as its walcast id would name it.
func TestDebeziumWebhookMirror(t *testing.T) {
	parallel(t)
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, big text)`,
		`ALTER TABLE items ALTER COLUMN big SET STORAGE EXTERNAL`,
		`INSERT INTO items SELECT g, g, NULL FROM generate_series(1, 50) g`)
	hook := &dbzHook{}
	url := serveLoopback(t, hook) + "/hooks"
	pipeline := writePipeline(t, "dbzhook", dsn, []string{"public.items"}, sinkSpec{
		ID: "hook", URL: url, Top: "  format = \"debezium\"\n  debezium {\n    name = \"dbserver1\"\n  }\n",
	})
	proc := startWalcast(t, pipeline)
	defer proc.stop()
	waitSlot(t, db, "walcast_dbzhook")
	requestBackfill(t, db, pipeline, "--table", "public.items")
	big := strings.Repeat("0123456789abcdef", 1000)
	for _, sql := range []string{
		`INSERT INTO items SELECT g, g, $1 FROM generate_series(51, 60) g`,
		`UPDATE items SET v = v + 100 WHERE id BETWEEN 51 AND 55`, // big unchanged: TOASTed, not sent
		`UPDATE items SET id = id + 1000 WHERE id IN (2, 52)`,     // key changes
		`DELETE FROM items WHERE id IN (3, 53)`,
	} {
		if strings.Contains(sql, "$1") {
			exec1(t, db, sql, big)
		} else {
			exec1(t, db, sql)
		}
	}
	waitFor(t, "the backfill to finish", time.Minute, func() bool {
		var state string
		db.QueryRow(t.Context(), `SELECT state FROM walcast.backfills ORDER BY id DESC LIMIT 1`).Scan(&state)
		return state == "done"
	})
	// The table as the TRUNCATE will find it: the mirror must equal it
	// when the truncate event arrives.
	beforeTruncate := tableRows(t, db, "public.items")
	exec1(t, db, `TRUNCATE items`)
	exec1(t, db, `INSERT INTO items VALUES (7, 7, 'x'), (8, 8, NULL)`)
	exec1(t, db, `UPDATE items SET id = 9 WHERE id = 8`)
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	waitFor(t, "the slot to confirm everything", time.Minute, func() bool {
		return confirmedFlush(t, db, "walcast_dbzhook") >= end
	})

	mirror := map[int]int{}
	ops := map[string]int{}
	placeholders := 0
	seen := map[[2]uint64]bool{}
	for _, raw := range hook.snapshot() {
		var e struct {
			Before map[string]any `json:"before"`
			After  map[string]any `json:"after"`
			Source struct {
				Name, Table string
				LSN         uint64 `json:"lsn"`
			} `json:"source"`
			Op          string `json:"op"`
			Transaction struct {
				TotalOrder uint64 `json:"total_order"`
			} `json:"transaction"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			t.Fatalf("event %s: %v", raw, err)
		}
		if e.Source.Name != "dbserver1" || e.Source.Table != "items" || e.Transaction.TotalOrder == 0 {
			t.Fatalf("event %s: source or transaction block not as documented", raw)
		}
		id := [2]uint64{e.Source.LSN, e.Transaction.TotalOrder}
		if seen[id] {
			continue // a redelivery, named as before
		}
		seen[id] = true
		ops[e.Op]++
		num := func(row map[string]any, col string) int { return int(row[col].(float64)) }
		switch e.Op {
		case "c", "r":
			mirror[num(e.After, "id")] = num(e.After, "v")
		case "u":
			if e.Before != nil && num(e.Before, "id") != num(e.After, "id") {
				delete(mirror, num(e.Before, "id")) // the key changed (docs/formats.md)
			}
			mirror[num(e.After, "id")] = num(e.After, "v")
			if e.After["big"] == "__debezium_unavailable_value" {
				placeholders++
			}
		case "d":
			delete(mirror, num(e.Before, "id"))
		case "t":
			if !maps.Equal(mirror, beforeTruncate) {
				t.Errorf("at the truncate the mirror has %d rows, the table had %d", len(mirror), len(beforeTruncate))
			}
			clear(mirror)
		default:
			t.Fatalf("event %s: op %q", raw, e.Op)
		}
	}
	if want := tableRows(t, db, "public.items"); !maps.Equal(mirror, want) || len(want) != 2 {
		t.Errorf("mirror %v, table %v", mirror, want)
	}
	if ops["r"] == 0 || ops["t"] != 1 || ops["c"] < 12 || ops["d"] < 2 || ops["u"] < 8 {
		t.Errorf("ops %v: want backfill reads, one truncate, inserts, updates and deletes", ops)
	}
	if placeholders == 0 {
		t.Error("no update left a TOASTed value out; the test did not test what it claims")
	}
	t.Logf("%d events applied (%v), %d unchanged TOASTed values as the placeholder; mirror equals the table", len(seen), ops, placeholders)
}

// TestDebeziumCatchupKeepsTheFormat: a webhook sink on the debezium format
// whose destination fails is detached onto a catch-up slot while an
// envelope sink goes on; once the destination is back it catches up and
// rejoins. Every committed change reaches it once as a Debezium event —
// from the catch-up stream's decoder and, after the rejoin, from the live
// one — and a Debezium consumer's mirror equals the table.
func TestDebeziumCatchupKeepsTheFormat(t *testing.T) {
	parallel(t)
	ctx := t.Context()
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	truthSlot(t, dsn, db, "truth_dbziso")
	fast := newReceiver(t)
	hook := &dbzHook{}
	hook.fail.Store(true)
	url := serveLoopback(t, hook) + "/hooks"
	pipeline := writePipeline(t, "dbziso", dsn, []string{"public.items"},
		sinkSpec{ID: "fast", URL: fast.URL, Batch: 200},
		sinkSpec{ID: "slow", URL: url, Batch: 100, Top: "  format = \"debezium\"\n",
			Extra: "    max_in_flight = 2\n    max_attempts = 1000\n"})
	proc := startCapturing(t, db, pipeline)
	defer proc.stop()
	if _, err := workload(ctx, db, rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3)), 5000); err != nil {
		t.Fatal(err)
	}
	proc.waitLog(t, "detaching it to catch up")
	hook.fail.Store(false)
	proc.waitLog(t, "sink rejoined the live stream")
	exec1(t, db, `UPDATE items SET v = v + 100 WHERE id IN (SELECT id FROM items ORDER BY id LIMIT 50)`)
	want := truth(t, db, "truth_dbziso", map[string]bool{"public.items": true})
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	waitFor(t, "the slot to confirm everything", 2*time.Minute, func() bool {
		return confirmedFlush(t, db, "walcast_dbziso") >= end
	})

	mirror := map[int]int{}
	seen := map[[2]uint64]bool{}
	for _, raw := range hook.snapshot() {
		var e struct {
			Before, After map[string]any
			Op            string
			Source        struct{ LSN uint64 }
			Transaction   struct {
				TotalOrder uint64 `json:"total_order"`
			}
		}
		if err := json.Unmarshal(raw, &e); err != nil || e.Op == "" || e.Transaction.TotalOrder == 0 {
			t.Fatalf("not a Debezium event: %s", raw)
		}
		id := [2]uint64{e.Source.LSN, e.Transaction.TotalOrder}
		if seen[id] {
			continue
		}
		seen[id] = true
		switch e.Op {
		case "c", "u":
			mirror[int(e.After["id"].(float64))] = int(e.After["v"].(float64))
		case "d":
			delete(mirror, int(e.Before["id"].(float64)))
		}
	}
	if len(seen) != len(want) {
		t.Errorf("the debezium sink got %d distinct events, %d changes were committed", len(seen), len(want))
	}
	checkMirror(t, db, map[string]map[int]int{"items": mirror}, "items")
	t.Logf("%d changes through detach, catch-up and rejoin, all as Debezium events", len(want))
}
