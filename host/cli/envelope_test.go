package cli

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walcast/walcast/host/pgtest"
)

// TestEnvelopeAcrossTypes sends insert, update, delete and truncate on two
// tables through the real webhook plugin and checks the documented
// envelope and type mapping as the receiver sees it.
func TestEnvelopeAcrossTypes(t *testing.T) {
	dsn, db := newSource(t,
		`
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE typed (
	id bigint PRIMARY KEY,
	small smallint, num int, real4 real, dbl double precision, nan double precision,
	price numeric(12,2), flag boolean, txt text, vc varchar(20), ch char(3),
	raw bytea, js json, jsb jsonb, uid uuid, day date, ts timestamp, tstz timestamptz,
	span interval, ints int[], texts text[], feel mood, big text);
ALTER TABLE typed ALTER COLUMN big SET STORAGE EXTERNAL;
CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL);`,
	)
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "types", dsn, []string{"public.typed", "public.customers"}, sinkSpec{ID: "hook", URL: rcv.URL})
	proc := startCapturing(t, db, pipeline)
	big := strings.Repeat("walcast-toast-", 8000) // ~110 KB, stored out of line
	exec1(t, db, `INSERT INTO typed VALUES (1, -2, 42, 1.5, 3.25, 'NaN', 12345678.90, true, 'he said "hi"', 'v', 'ab',
		'\x00ff', '{"a": [1, 2]}', '{"b": {"c": null}}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2026-11-30',
		'2026-11-30 10:00:00.5', '2026-11-30 10:00:00.123456+02', '1 day 02:03:04', '{1,NULL,3}', '{"x y",NULL,"q\"t"}', 'happy', $1)`, big)
	exec1(t, db, `INSERT INTO customers VALUES (7, 'ada')`)
	exec1(t, db, `UPDATE typed SET num = 43 WHERE id = 1`) // big is unchanged TOAST
	exec1(t, db, `DELETE FROM customers WHERE id = 7`)
	exec1(t, db, `TRUNCATE typed, customers`)
	waitFor(t, "6 events", time.Minute, func() bool { return rcv.distinct() == 6 })
	proc.stop()
	got := rcv.events()
	// Different rows travel in parallel lanes: put them in commit order.
	slices.SortFunc(got, func(a, b received) int { return a.ID.Compare(b.ID) })

	decode := func(raw []byte) map[string]any {
		var m map[string]any
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	insert := decode(got[0].Raw)
	for _, f := range []string{"id", "commit_lsn", "xid", "commit_time", "schema", "table", "op", "key", "new", "old"} {
		if _, ok := insert[f]; !ok {
			t.Errorf("envelope lacks %q: %s", f, got[0].Raw)
		}
	}
	if insert["op"] != "insert" || insert["schema"] != "public" || insert["table"] != "typed" || insert["old"] != nil {
		t.Errorf("insert envelope: %s", got[0].Raw)
	}
	if !strings.HasPrefix(insert["id"].(string), insert["commit_lsn"].(string)+":") {
		t.Errorf("id %v does not start with commit_lsn %v", insert["id"], insert["commit_lsn"])
	}
	if _, err := time.Parse("2006-01-02T15:04:05.000000Z07:00", insert["commit_time"].(string)); err != nil {
		t.Errorf("commit_time: %v", err)
	}
	wantNew := map[string]any{
		"id": json.Number("1"), "small": json.Number("-2"), "num": json.Number("42"), "real4": json.Number("1.5"),
		"dbl": json.Number("3.25"), "nan": "NaN", "price": "12345678.90", "flag": true, "txt": `he said "hi"`,
		"vc": "v", "ch": "ab ", "raw": "AP8=", "js": map[string]any{"a": []any{json.Number("1"), json.Number("2")}},
		"jsb": map[string]any{"b": map[string]any{"c": nil}}, "uid": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
		"day": "2026-11-30", "ts": "2026-11-30T10:00:00.500000", "tstz": "2026-11-30T08:00:00.123456Z",
		"span": "1 day 02:03:04", "ints": []any{json.Number("1"), nil, json.Number("3")},
		"texts": []any{"x y", nil, `q"t`}, "feel": "happy", "big": big,
	}
	if gotNew := insert["new"].(map[string]any); !reflect.DeepEqual(gotNew, wantNew) {
		for k, v := range wantNew {
			if !reflect.DeepEqual(gotNew[k], v) {
				t.Errorf("new.%s = %#v, want %#v", k, gotNew[k], v)
			}
		}
	}
	if !reflect.DeepEqual(insert["key"], map[string]any{"id": json.Number("1")}) {
		t.Errorf("key = %v", insert["key"])
	}

	cust := decode(got[1].Raw)
	if cust["table"] != "customers" || cust["op"] != "insert" {
		t.Errorf("second event: %s", got[1].Raw)
	}

	update := decode(got[2].Raw)
	newRow := update["new"].(map[string]any)
	if _, present := newRow["big"]; present {
		t.Errorf("unchanged TOAST column reported in new: %.100v", newRow["big"])
	}
	if !reflect.DeepEqual(update["unchanged"], []any{"big"}) || newRow["num"] != json.Number("43") || update["old"] != nil {
		t.Errorf("update envelope: %s", got[2].Raw)
	}

	del := decode(got[3].Raw)
	if del["op"] != "delete" || del["new"] != nil || !reflect.DeepEqual(del["old"], map[string]any{"id": json.Number("7")}) ||
		!reflect.DeepEqual(del["key"], map[string]any{"id": json.Number("7")}) {
		t.Errorf("delete envelope: %s", got[3].Raw)
	}

	// One TRUNCATE of two tables: two events, consecutive indexes.
	t1, t2 := decode(got[4].Raw), decode(got[5].Raw)
	if got[4].ID.CommitLSN != got[5].ID.CommitLSN || got[4].ID.Index != 0 || got[5].ID.Index != 1 {
		t.Errorf("truncate ids %s, %s", got[4].ID, got[5].ID)
	}
	for _, tr := range []map[string]any{t1, t2} {
		if tr["op"] != "truncate" || tr["key"] != nil || tr["new"] != nil || tr["old"] != nil || tr["cascade"] != false || tr["restart_identity"] != false {
			t.Errorf("truncate envelope: %v", tr)
		}
	}
	if t1["table"] == t2["table"] {
		t.Errorf("both truncate events name %v", t1["table"])
	}
}

// TestPostgresRestart restarts PostgreSQL (an immediate shutdown: a crash
// from its point of view) while walcast streams; walcast reconnects with
// backoff and every committed change arrives.
func TestPostgresRestart(t *testing.T) {
	ctx := context.Background()
	own := pgtest.New(t, pgtest.Options{})
	dsn := own.DSN("postgres")
	db := connect(t, dsn)
	exec1(t, db, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	truthSlot(t, dsn, db, "truth_restart")
	rcv := newReceiver(t)
	rcv.delay = 20 * time.Millisecond
	pipeline := writePipeline(t, "restart", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL, Batch: 50})
	proc := startCapturing(t, db, pipeline)
	for i := 0; i < 2000; i += 100 {
		exec1(t, db, `INSERT INTO items SELECT g, 0, 'x' FROM generate_series($1::int, $2::int) g`, i, i+99)
	}
	// Restart while walcast streams: it has delivered something, and the
	// slow receiver keeps the rest in flight.
	waitFor(t, "streaming to start", time.Minute, func() bool { return rcv.count() > 0 })
	db.Close(ctx)
	if err := own.Restart(ctx, "immediate"); err != nil {
		t.Fatal(err)
	}
	db = connect(t, dsn)
	for i := 2000; i < 4000; i += 100 {
		exec1(t, db, `UPDATE items SET v = v + 1 WHERE id BETWEEN $1 - 2000 AND $1 - 1901`, i)
	}
	want := truth(t, db, "truth_restart", map[string]bool{"public.items": true})
	waitFor(t, "every change after the restart", 2*time.Minute, func() bool { return rcv.distinct() == len(want) })
	proc.stop()
	dups := verify(t, want, rcv.events())
	// Whichever connection notices first: the stream reconnects, or the
	// leadership session ends the term and the next one streams again.
	if log := proc.logText(); countLines(log, "reconnecting") == 0 && countLines(log, "standing by again after losing the leadership") == 0 {
		t.Error("walcast logged neither a reconnect nor a new term: the restart was not exercised")
	}
	t.Logf("%d changes, %d duplicates across the restart", len(want), dups)
}
