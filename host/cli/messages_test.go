package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/pgtest"
	"github.com/walcast/walcast/pluginkit"
)

// Application messages through the WAL (pg_logical_emit_message): what
// test_decoding saw, PostgreSQL's own decoder, is the truth of which
// messages and rows were committed, where, and with what content.

// walItem is one event the slot should yield: a row change or a message,
// as test_decoding decoded it.
type walItem struct {
	Xid   uint32 // 0 for a non-transactional message
	Index int    // inside the transaction; 0 for a non-transactional message
	LSN   uint64 // a non-transactional message's LSN, as PostgreSQL reports it
	Op    string
	Key   string // {"id":N} for a row, {"prefix":…} for a message
	// Content is a message's content as test_decoding printed it.
	Content       string
	Transactional bool
}

var tdMessage = regexp.MustCompile(`(?s)^message: transactional: ([01]) prefix: (.*), sz: (\d+) content:(.*)$`)

// messageTruth reads what the test_decoding slot saw, in stream order:
// inserts of the listed tables and the messages whose prefix starts with
// prefix, indexed as walcast indexes them (other messages take no index).
func messageTruth(t testing.TB, db *pgx.Conn, slot string, tables map[string]bool, prefix string) []walItem {
	t.Helper()
	// Not skip-empty-xacts: with it, test_decoding prints no BEGIN for a
	// transaction whose only changes are messages.
	rows, err := db.Query(context.Background(),
		`SELECT lsn::text, data FROM pg_logical_slot_peek_changes($1, NULL, NULL, 'include-xids', '1')`, slot)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []walItem
	var xid uint32
	idx, inTx := 0, false
	for rows.Next() {
		var lsnText, line string
		if err := rows.Scan(&lsnText, &line); err != nil {
			t.Fatal(err)
		}
		if m := tdBegin.FindStringSubmatch(line); m != nil {
			x, _ := strconv.ParseUint(m[1], 10, 32)
			xid, idx, inTx = uint32(x), 0, true
			continue
		}
		if strings.HasPrefix(line, "COMMIT") {
			inTx = false
			continue
		}
		if m := tdMessage.FindStringSubmatch(line); m != nil {
			if !strings.HasPrefix(m[2], prefix) {
				continue
			}
			it := walItem{Op: "message", Key: `{"prefix":"` + m[2] + `"}`, Content: m[4], Transactional: m[1] == "1"}
			if it.Transactional != inTx {
				t.Fatalf("test_decoding: message %q transactional=%v inside a transaction=%v", line, it.Transactional, inTx)
			}
			if it.Transactional {
				it.Xid, it.Index = xid, idx
				idx++
			} else {
				lsn, err := pglogrepl.ParseLSN(lsnText)
				if err != nil {
					t.Fatal(err)
				}
				it.LSN = uint64(lsn)
			}
			out = append(out, it)
			continue
		}
		m := tdChange.FindStringSubmatch(line)
		if m == nil || !tables[m[1]] {
			continue
		}
		out = append(out, walItem{Xid: xid, Index: idx, Op: strings.ToLower(m[2]), Key: `{"id":` + m[3] + `}`})
		idx++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// messageEnvelope is what the tests read of a message event.
type messageEnvelope struct {
	ID            string          `json:"id"`
	CommitLSN     *string         `json:"commit_lsn"`
	Xid           *uint32         `json:"xid"`
	Schema        *string         `json:"schema"`
	Op            string          `json:"op"`
	Prefix        string          `json:"prefix"`
	Transactional bool            `json:"transactional"`
	LSN           string          `json:"lsn"`
	Base64        bool            `json:"content_base64"`
	Content       json.RawMessage `json:"content"`
}

// checkWALItems checks what a sink received against the truth: every item
// arrived, under the id its place in the WAL gives it (a transaction's
// xid and index; for a non-transactional message, the LSN before the one
// PostgreSQL reports, index 0), with its content; nothing else arrived;
// every copy of an id is byte-identical. It returns the first arrival of
// each id in arrival order, and the number of duplicates.
func checkWALItems(t testing.TB, want []walItem, got []received) (firsts []received, dups int) {
	t.Helper()
	type txIdx struct {
		xid uint32
		idx uint64
	}
	byTx := map[txIdx]walItem{}
	byID := map[pluginkit.EventID]walItem{}
	for _, w := range want {
		if w.Op == "message" && !w.Transactional {
			byID[pluginkit.EventID{CommitLSN: w.LSN - 1}] = w
		} else {
			byTx[txIdx{w.Xid, uint64(w.Index)}] = w
		}
	}
	seen := map[pluginkit.EventID][]byte{}
	matched := map[walItem]bool{}
	for _, g := range got {
		if first, ok := seen[g.ID]; ok {
			if !bytes.Equal(first, g.Raw) {
				t.Errorf("event %s arrived twice with different bytes:\n%s\n%s", g.ID, first, g.Raw)
			}
			dups++
			continue
		}
		seen[g.ID] = g.Raw
		firsts = append(firsts, g)
		w, ok := byID[g.ID]
		if !ok {
			w, ok = byTx[txIdx{g.Xid, g.ID.Index}]
		}
		if !ok {
			t.Errorf("event %s (xid %d, %s %s) is not in the truth: %s", g.ID, g.Xid, g.Op, g.Key, g.Raw)
			continue
		}
		matched[w] = true
		if g.Op != w.Op || g.Key != w.Key {
			t.Errorf("event %s is %s %s, test_decoding saw %s %s", g.ID, g.Op, g.Key, w.Op, w.Key)
			continue
		}
		if w.Op == "message" {
			checkMessageEvent(t, w, g)
		}
	}
	for _, w := range want {
		if !matched[w] {
			t.Errorf("missing: %+v", w)
		}
	}
	return firsts, dups
}

// checkMessageEvent checks one message event's envelope against the
// message test_decoding decoded.
func checkMessageEvent(t testing.TB, w walItem, g received) {
	t.Helper()
	var e messageEnvelope
	if err := json.Unmarshal(g.Raw, &e); err != nil {
		t.Errorf("event %s: %v", g.ID, err)
		return
	}
	content := []byte(e.Content)
	if e.Base64 {
		if err := json.Unmarshal(e.Content, &content); err != nil {
			t.Errorf("event %s: base64 content: %v", g.ID, err)
			return
		}
	} else {
		var want bytes.Buffer
		if err := json.Compact(&want, []byte(w.Content)); err != nil {
			t.Errorf("event %s: content %q arrived as JSON, but is not JSON: %v", g.ID, w.Content, err)
			return
		}
		w.Content = want.String()
	}
	if string(content) != w.Content {
		t.Errorf("event %s: content %q, want %q", g.ID, content, w.Content)
	}
	if e.Transactional != w.Transactional || e.Schema != nil || e.Prefix == "" {
		t.Errorf("event %s: transactional=%v schema=%v prefix=%q: %s", g.ID, e.Transactional, e.Schema, e.Prefix, g.Raw)
	}
	if !w.Transactional {
		if e.CommitLSN != nil || e.Xid != nil || e.LSN != pluginkit.FormatLSN(w.LSN) {
			t.Errorf("non-transactional message %s: commit_lsn %v, xid %v, lsn %s (PostgreSQL: %s)", g.ID, e.CommitLSN, e.Xid, e.LSN, pluginkit.FormatLSN(w.LSN))
		}
	}
}

// checkIDOrder checks that events arrived (first copies) in id order.
func checkIDOrder(t testing.TB, what string, firsts []received) {
	t.Helper()
	for i := 1; i < len(firsts); i++ {
		if firsts[i].ID.Compare(firsts[i-1].ID) <= 0 {
			t.Errorf("%s: %s arrived after %s", what, firsts[i].ID, firsts[i-1].ID)
		}
	}
}

// TestMessagesThroughTheWAL: application messages whose prefix the source
// lists arrive as message events in commit order with their
// transaction's rows, under ids test_decoding's view of the WAL predicts;
// a rolled-back transaction's message never arrives, a non-transactional
// one does even when its transaction rolls back; other prefixes do not
// arrive and take no index; a sink's ops filter can leave messages out and
// its tables filter does not.
func TestMessagesThroughTheWAL(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`,
		`CREATE TABLE orders (id int PRIMARY KEY, status text)`, `INSERT INTO orders VALUES (42, 'new')`)
	truthSlot(t, dsn, db, "truth_messages")
	all, rows, lanes := newReceiver(t), newReceiver(t), newReceiver(t)
	pipeline := writePipeline(t, "messages", dsn, []string{"public.items"},
		sinkSpec{ID: "all", URL: all.URL, Batch: 3, Extra: "    ordering = \"strict\"\n"},
		sinkSpec{ID: "rows", URL: rows.URL, Top: "  ops = [\"insert\"]\n"},
		sinkSpec{ID: "lanes", URL: lanes.URL, Batch: 2, Top: "  tables = [\"public.items\"]\n"})
	withSource(t, pipeline, "  messages {\n    prefixes = [\"app.\"]\n  }\n")

	proc := startCapturing(t, db, pipeline)
	wdb := connect(t, dsn)
	for _, step := range []string{
		`BEGIN; INSERT INTO items VALUES (1, 1); SELECT pg_logical_emit_message(true, 'app.orders', '{"order": 1,  "items": [1, 2]}'); INSERT INTO items VALUES (2, 1); COMMIT`,
		`BEGIN; INSERT INTO items VALUES (3, 1); SELECT pg_logical_emit_message(true, 'app.orders', '{"order": "rolled back"}'); ROLLBACK`,
		// Non-transactional, in a transaction that rolls back: arrives
		// (not JSON: as base64).
		`BEGIN; INSERT INTO items VALUES (4, 1); SELECT pg_logical_emit_message(false, 'app.audit', 'attempt 4 é'); ROLLBACK`,
		`SELECT pg_logical_emit_message(true, 'other.x', 'not ours')`,
		`BEGIN; INSERT INTO items VALUES (5, 1); SELECT pg_logical_emit_message(true, 'other.x', 'not ours'); SELECT pg_logical_emit_message(true, 'app.orders', '{"order": 2}'); COMMIT`,
		// Non-transactional right before its transaction's commit: PostgreSQL
		// reports it at the commit record's LSN.
		`BEGIN; INSERT INTO items VALUES (6, 1); SELECT pg_logical_emit_message(false, 'app.audit', '{"n": 6}'); COMMIT`,
		`SELECT pg_logical_emit_message(false, 'app.audit', '[7]')`,
		`SELECT pg_logical_emit_message(true, 'app.alone', '"a transaction of one message"')`,
		`UPDATE items SET v = 2 WHERE id = 1`,
	} {
		if _, err := wdb.Exec(ctx, step); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	// docs/events.md's example, verbatim (orders is not captured: its
	// message is).
	if _, err := wdb.Exec(ctx, eventsDocSQL(t)); err != nil {
		t.Fatalf("docs/events.md's example: %v", err)
	}
	// A non-transactional message outside a transaction is streamed once
	// its WAL is flushed: this commit flushes it.
	exec1(t, wdb, `INSERT INTO items VALUES (8, 1)`)
	want := messageTruth(t, db, "truth_messages", map[string]bool{"public.items": true}, "app.")
	nmsg := 0
	for _, w := range want {
		if w.Op == "message" {
			nmsg++
		}
	}
	if len(want) != 13 || nmsg != 7 {
		t.Fatalf("test_decoding saw %d events, %d messages, want 13 and 7: %+v", len(want), nmsg, want)
	}
	waitFor(t, "every event at the strict sink", time.Minute, func() bool { return all.distinct() >= len(want) })
	waitFor(t, "every event at the tables-filtered sink", time.Minute, func() bool { return lanes.distinct() >= len(want) })
	waitFor(t, "the inserts at the ops-filtered sink", time.Minute, func() bool { return rows.distinct() >= len(want)-nmsg-1 })
	proc.stop()

	firsts, _ := checkWALItems(t, want, all.events())
	checkIDOrder(t, "strict sink", firsts)
	// Strict order is the stream's: test_decoding's order, item by item.
	for i := range min(len(firsts), len(want)) {
		if firsts[i].Key != want[i].Key {
			t.Errorf("arrival %d at the strict sink is %s %s, the stream has %s %s there", i, firsts[i].ID, firsts[i].Key, want[i].Op, want[i].Key)
		}
	}
	lanesFirst, _ := checkWALItems(t, want, lanes.events())
	byPrefix := map[string][]received{}
	for _, g := range lanesFirst {
		if g.Op == "message" {
			byPrefix[g.Key] = append(byPrefix[g.Key], g)
		}
	}
	for p, evs := range byPrefix {
		checkIDOrder(t, "prefix "+p, evs)
	}
	for _, g := range rows.events() {
		if g.Op != "insert" {
			t.Errorf("the sink with ops = [\"insert\"] got %s %s", g.Op, g.ID)
		}
	}
	for _, g := range firsts {
		if g.Op == "message" {
			t.Logf("%s %s", g.ID, g.Raw)
		}
	}
}

// messageWorkload commits n small transactions, each with rows of items
// and a transactional message of one of a few prefixes; every third also
// emits a non-transactional message (inside it), every fifth rolls back.
func messageWorkload(ctx context.Context, db *pgx.Conn, r *rand.Rand, n int) error {
	for i := range n {
		tx := fmt.Sprintf(`BEGIN; INSERT INTO items VALUES (%d, %d) ON CONFLICT (id) DO UPDATE SET v = items.v + 1; `, r.IntN(50), i)
		tx += fmt.Sprintf(`SELECT pg_logical_emit_message(true, 'app.p%d', '{"tx": %d}'); `, r.IntN(3), i)
		if i%3 == 0 {
			tx += fmt.Sprintf(`SELECT pg_logical_emit_message(false, 'app.nt', '{"tx": %d}'); `, i)
		}
		tx += fmt.Sprintf(`INSERT INTO items VALUES (%d, 0) ON CONFLICT DO NOTHING; `, 1000+i)
		if i%5 == 4 {
			tx += "ROLLBACK"
		} else {
			tx += "COMMIT"
		}
		if _, err := db.Exec(ctx, tx); err != nil {
			return fmt.Errorf("transaction %d: %w", i, err)
		}
	}
	return nil
}

// TestMessagesSurviveSIGKILL kills walcast with SIGKILL while message
// events and rows are being delivered (more rounds with WALCAST_CHAOS)
// and checks against test_decoding that every message and row arrived,
// every copy of an id is byte-identical (a non-transactional message's id
// included: it comes from its place in the WAL), and first arrivals came
// in id order (the sink is strictly ordered).
func TestMessagesSurviveSIGKILL(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	truthSlot(t, dsn, db, "truth_msgkill")
	rcv := newReceiver(t)
	rcv.setDelay(3 * time.Millisecond)
	pipeline := writePipeline(t, "msgkill", dsn, []string{"public.items"},
		sinkSpec{ID: "hook", URL: rcv.URL, Batch: 7, Extra: "    ordering = \"strict\"\n"})
	withSource(t, pipeline, "  messages {\n    prefixes = [\"app.\"]\n  }\n")

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 3))
	wdb := connect(t, dsn)
	workDone := make(chan error, 1)
	proc := startCapturing(t, db, pipeline)
	go func() { workDone <- messageWorkload(ctx, wdb, rand.New(rand.NewPCG(seed, 4)), pgtest.Chaos(t, 300)) }()
	kills := pgtest.Chaos(t, 3)
	var atKill []int // distinct events received at each kill
	for k := range kills {
		target := rcv.count() + 20 + r.IntN(150)
		waitFor(t, fmt.Sprintf("%d deliveries before kill %d", target, k+1), time.Minute, func() bool { return rcv.count() >= target })
		proc.kill()
		atKill = append(atKill, rcv.distinct())
		t.Logf("kill %d after %d deliveries (%d distinct)", k+1, rcv.count(), rcv.distinct())
		proc = startWalcast(t, pipeline)
	}
	if err := <-workDone; err != nil {
		t.Fatal(err)
	}
	exec1(t, wdb, `INSERT INTO items VALUES (-1, 0)`) // flushes the last non-transactional message
	want := messageTruth(t, db, "truth_msgkill", map[string]bool{"public.items": true}, "app.")
	// A kill after everything arrived proves nothing.
	for k, n := range atKill {
		if n >= len(want) {
			t.Fatalf("kill %d came after all %d events had arrived", k+1, len(want))
		}
	}
	waitFor(t, fmt.Sprintf("all %d events", len(want)), 2*time.Minute, func() bool { return rcv.distinct() >= len(want) })
	proc.stop()
	firsts, dups := checkWALItems(t, want, rcv.events())
	checkIDOrder(t, "strict sink", firsts)
	nt := 0
	for _, w := range want {
		if w.Op == "message" && !w.Transactional {
			nt++
		}
	}
	t.Logf("%d events (%d non-transactional messages), %d duplicates after %d SIGKILLs", len(want), nt, dups, kills)
}

// eventsDocSQL is docs/events.md's application message example.
func eventsDocSQL(t *testing.T) string {
	t.Helper()
	for _, b := range docBlocks(t) {
		if b.file == "events.md" && b.lang == "sql" && strings.Contains(b.text, "pg_logical_emit_message") {
			return b.text
		}
	}
	t.Fatal("docs/events.md has no sql block with pg_logical_emit_message")
	return ""
}
