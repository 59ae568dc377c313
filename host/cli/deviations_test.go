package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestDocumentedDeviations pins what the README says about behaviour that
// follows PostgreSQL rather than what a user might expect, each checked
// against test_decoding:
//   - an update that kept a TOASTed (out-of-line) key carries that key in
//     "old" (PostgreSQL logs it);
//   - STORED generated columns are absent (pgoutput never sends them);
//   - REPLICA IDENTITY FULL is keyed by the primary key as of decoding;
//   - a table added to tables later is captured only from the restart that
//     adds it.
func TestDocumentedDeviations(t *testing.T) {
	dsn, db := newSource(t,
		`CREATE TABLE docs (code text PRIMARY KEY, v int NOT NULL)`,
		`ALTER TABLE docs ALTER COLUMN code SET STORAGE EXTERNAL`, // a 2.5 kB key goes out of line
		`CREATE TABLE gen (id int PRIMARY KEY, a int NOT NULL, twice int GENERATED ALWAYS AS (a * 2) STORED)`,
		`CREATE TABLE full_t (id int NOT NULL, code int NOT NULL, v int NOT NULL)`,
		`ALTER TABLE full_t REPLICA IDENTITY FULL`,
		`CREATE TABLE later (id int PRIMARY KEY, v int NOT NULL)`,
	)
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "deviations", dsn, []string{"public.docs", "public.gen", "public.full_t"}, sinkSpec{ID: "hook", URL: rcv.URL})
	truthSlot(t, dsn, db, "truth_deviations")
	proc := startCapturing(t, db, pipeline)
	proc.waitLog(t, "streaming from slot")
	key := strings.Repeat("k", 2500)
	exec1(t, db, `INSERT INTO docs VALUES ($1, 0)`, key)
	exec1(t, db, `UPDATE docs SET v = 1`)
	exec1(t, db, `INSERT INTO gen (id, a) VALUES (1, 21)`)
	exec1(t, db, `INSERT INTO full_t VALUES (1, 10, 0)`)
	waitFor(t, "4 events", time.Minute, func() bool { return rcv.distinct() == 4 })
	proc.stop()

	// While walcast is stopped: a change to full_t, then a primary key on
	// it; and a change to a table that is not listed yet.
	exec1(t, db, `UPDATE full_t SET v = 1`)
	exec1(t, db, `ALTER TABLE full_t ADD PRIMARY KEY (code)`)
	exec1(t, db, `INSERT INTO later VALUES (1, 0)`)
	pipeline = writePipeline(t, "deviations", dsn, []string{"public.docs", "public.gen", "public.full_t", "public.later"}, sinkSpec{ID: "hook", URL: rcv.URL})
	proc = startWalcast(t, pipeline)
	proc.waitLog(t, "streaming from slot")
	exec1(t, db, `INSERT INTO later VALUES (2, 0)`)
	waitFor(t, "the insert into later after the restart", time.Minute, func() bool {
		for _, e := range rcv.events() {
			if e.Table == "later" {
				return true
			}
		}
		return false
	})
	proc.stop()

	var tdLater, tdGen int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE data LIKE 'table public.later: INSERT:%'),
		count(*) FILTER (WHERE data LIKE 'table public.gen: INSERT:%twice%') FROM pg_logical_slot_peek_changes('truth_deviations', NULL, NULL)`).Scan(&tdLater, &tdGen); err != nil {
		t.Fatal(err)
	}
	byTable := map[string][]map[string]json.RawMessage{}
	for _, e := range rcv.events() {
		var m map[string]json.RawMessage
		json.Unmarshal(e.Raw, &m)
		byTable[e.Table] = append(byTable[e.Table], m)
	}
	if d := byTable["docs"]; len(d) != 2 || !strings.Contains(string(d[1]["old"]), key) {
		t.Errorf("docs: %d events; the update that kept its TOASTed key has old %.60s, want the key", len(d), d[1]["old"])
	}
	if g := byTable["gen"]; len(g) != 1 || strings.Contains(string(g[0]["new"]), "twice") || tdGen != 1 {
		t.Errorf("gen: new %s (test_decoding shows twice: %d), want the generated column absent", g[0]["new"], tdGen)
	}
	f := byTable["full_t"]
	if len(f) != 2 || string(f[0]["key"]) != `{"code":10,"id":1,"v":0}` && string(f[0]["key"]) != `{"id":1,"code":10,"v":0}` || string(f[1]["key"]) != `{"code":10}` {
		t.Errorf("full_t keys: %s then %s; want every column, then the primary key added later (as of decoding)", f[0]["key"], f[1]["key"])
	}
	if l := byTable["later"]; len(l) != 1 || tdLater != 2 {
		t.Errorf("later: %d events delivered of %d committed, want only the one after the restart", len(l), tdLater)
	}
}
