package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

// Mirror mode's promises that the conformance suite does not reach: two
// sinks sharing one checkpoint (a zombie plugin, a second walcast) apply a
// batch once, and create_tables = false refuses what the target lacks with
// a message saying what to create.

// rowEvent is an insert of (id, v) into public.<table>.
func rowEvent(t testing.TB, table string, lsn uint64, idx, id, v int) pluginkit.Event {
	t.Helper()
	eid := pluginkit.EventID{CommitLSN: lsn, Index: uint64(idx)}
	key := fmt.Sprintf(`{"id":%d}`, id)
	payload, err := json.Marshal(map[string]any{
		"id": eid.String(), "commit_lsn": pluginkit.FormatLSN(lsn), "xid": 7, "commit_time": "2026-01-02T03:04:05.000000Z",
		"schema": "public", "table": table, "op": "insert",
		"key": json.RawMessage(key), "new": map[string]int{"id": id, "v": v}, "old": nil,
	})
	if err != nil {
		t.Fatal(err)
	}
	return pluginkit.Event{ID: eid, Schema: "public", Table: table, Op: pluginkit.OpInsert, Key: []byte(key), Payload: payload}
}

// openSink configures and opens a sink on cfg as sink "mirror" of pipeline
// "p": the same identity, so the same checkpoint row, each time.
func openSink(t *testing.T, cfg map[string]any) *Sink {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := newSink(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := s.Configure(ctx, pluginkit.Setup{Config: cfgJSON(t, cfg), Sink: pluginkit.Identity{Pipeline: "p", SinkID: "mirror"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// TestSameCheckpointAppliesOnce delivers one batch through two sinks of
// the same checkpoint key at once: the first to lock the checkpoint row
// applies it, the other waits, then finds it at or below the checkpoint
// and skips it all. An audit trigger counts the row writes.
func TestSameCheckpointAppliesOnce(t *testing.T) {
	dsn := cluster.Database(t)
	db := connect(t, dsn)
	ctx := context.Background()
	for _, sql := range []string{
		`CREATE TABLE twice (id int PRIMARY KEY, v int)`,
		`CREATE TABLE writes (id int, v int)`,
		`CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO writes VALUES (NEW.id, NEW.v); RETURN NULL; END $$`,
		`CREATE TRIGGER audit AFTER INSERT OR UPDATE ON twice FOR EACH ROW EXECUTE FUNCTION audit()`,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	cfg := map[string]any{"dsn": dsn, "create_tables": false}
	a, b := openSink(t, cfg), openSink(t, cfg)
	const n = 200
	events := make([]pluginkit.Event, n)
	for i := range events {
		events[i] = rowEvent(t, "twice", 0x1000000, i, i+1, i)
	}
	var wg sync.WaitGroup
	results := make([]pluginkit.DeliverResult, 2)
	errs := make([]error, 2)
	for i, s := range []*Sink{a, b} {
		wg.Go(func() {
			dctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			results[i], errs[i] = s.Deliver(dctx, pluginkit.Batch{Events: events})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var rows, writes int
	db.QueryRow(ctx, `SELECT (SELECT count(*) FROM twice), (SELECT count(*) FROM writes)`).Scan(&rows, &writes)
	dups := results[0].Duplicates + results[1].Duplicates
	if rows != n || writes != n || dups != n {
		t.Fatalf("two sinks on one checkpoint: %d rows, %d row writes, %d duplicates reported; want %d of each", rows, writes, dups, n)
	}
}

// TestCreateTablesFalse: with create_tables = false, an event for a table
// the target lacks, or for a column it lacks, is refused (permanent: the
// host parks it) with what to create; nothing is created.
func TestCreateTablesFalse(t *testing.T) {
	dsn := cluster.Database(t)
	db := connect(t, dsn)
	ctx := context.Background()
	s := openSink(t, map[string]any{"dsn": dsn, "create_tables": false})
	deliver := func(e pluginkit.Event, want ...string) {
		t.Helper()
		_, err := s.Deliver(ctx, pluginkit.Batch{Events: []pluginkit.Event{e}})
		var be *pluginkit.BatchError
		if errors.As(err, &be) && be.Failed[0] != nil {
			err = be.Failed[0]
		}
		if k, _ := pluginkit.KindOf(err); err == nil || k != pluginkit.KindPermanent {
			t.Fatalf("deliver %s: %v (kind %v), want a permanent refusal", e.Table, err, k)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("deliver %s: %q does not say %q", e.Table, err, w)
			}
		}
	}
	deliver(rowEvent(t, "absent", 0x2000000, 0, 1, 1), "target table public.absent does not exist", "pg_dump --schema-only --table=public.absent")
	var exists bool
	db.QueryRow(ctx, `SELECT to_regclass('public.absent') IS NOT NULL`).Scan(&exists)
	if exists {
		t.Fatal("create_tables = false created public.absent")
	}
	if _, err := db.Exec(ctx, `CREATE TABLE narrow (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	deliver(rowEvent(t, "narrow", 0x2000001, 0, 1, 1), "target table public.narrow has no column v", "ALTER TABLE public.narrow ADD COLUMN")
}

// TestGeneratedAndIdentityColumns: the target computes its generated
// columns itself (a value the event carries for one is not written), and a
// GENERATED ALWAYS identity key takes the source's value.
func TestGeneratedAndIdentityColumns(t *testing.T) {
	dsn := cluster.Database(t)
	db := connect(t, dsn)
	ctx := context.Background()
	if _, err := db.Exec(ctx, `CREATE TABLE gen (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v int, twice int GENERATED ALWAYS AS (v * 2) STORED)`); err != nil {
		t.Fatal(err)
	}
	s := openSink(t, map[string]any{"dsn": dsn, "create_tables": false})
	e := rowEvent(t, "gen", 0x3000000, 0, 41, 3)
	e.Payload = []byte(strings.Replace(string(e.Payload), `"new":{"id":41,"v":3}`, `"new":{"id":41,"twice":99,"v":3}`, 1))
	if !strings.Contains(string(e.Payload), `"twice":99`) {
		t.Fatalf("payload %s", e.Payload)
	}
	if _, err := s.Deliver(ctx, pluginkit.Batch{Events: []pluginkit.Event{e}}); err != nil {
		t.Fatal(err)
	}
	var id, v, twice int
	if err := db.QueryRow(ctx, `SELECT id, v, twice FROM gen`).Scan(&id, &v, &twice); err != nil {
		t.Fatal(err)
	}
	if id != 41 || v != 3 || twice != 6 {
		t.Fatalf("row (%d, %d, %d), want (41, 3, 6)", id, v, twice)
	}
}

// event is an event of public.<table> with the envelope's members given.
func event(t testing.TB, table string, lsn uint64, op pluginkit.Op, key string, members map[string]any) pluginkit.Event {
	t.Helper()
	eid := pluginkit.EventID{CommitLSN: lsn}
	env := map[string]any{"id": eid.String(), "commit_lsn": pluginkit.FormatLSN(lsn), "xid": 7, "commit_time": "2026-01-02T03:04:05.000000Z",
		"schema": "public", "table": table, "op": string(op), "key": json.RawMessage(key), "new": nil, "old": nil}
	for k, v := range members {
		env[k] = v
	}
	payload, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return pluginkit.Event{ID: eid, Schema: "public", Table: table, Op: op, Key: []byte(key), Payload: payload}
}

// TestUnchangedAndTruncate: an update without a TOASTed column PostgreSQL
// did not resend (listed in unchanged) leaves the target's value; a
// truncate with restart_identity restarts the target's sequences.
func TestUnchangedAndTruncate(t *testing.T) {
	dsn := cluster.Database(t)
	db := connect(t, dsn)
	ctx := context.Background()
	if _, err := db.Exec(ctx, `CREATE TABLE toasty (id int PRIMARY KEY, v int, big text, n serial)`); err != nil {
		t.Fatal(err)
	}
	s := openSink(t, map[string]any{"dsn": dsn, "create_tables": false})
	deliver := func(e pluginkit.Event) {
		t.Helper()
		if _, err := s.Deliver(ctx, pluginkit.Batch{Events: []pluginkit.Event{e}}); err != nil {
			t.Fatal(err)
		}
	}
	big := strings.Repeat("x", 5000)
	deliver(event(t, "toasty", 0x4000000, pluginkit.OpInsert, `{"id":1}`, map[string]any{"new": map[string]any{"id": 1, "v": 1, "big": big, "n": 7}}))
	deliver(event(t, "toasty", 0x4000001, pluginkit.OpUpdate, `{"id":1}`, map[string]any{"new": map[string]any{"id": 1, "v": 2, "n": 7}, "unchanged": []string{"big"}}))
	var v int
	var got string
	if err := db.QueryRow(ctx, `SELECT v, big FROM toasty WHERE id = 1`).Scan(&v, &got); err != nil {
		t.Fatal(err)
	}
	if v != 2 || got != big {
		t.Fatalf("after an update leaving big unchanged: v %d, big %d bytes; want 2 and the %d bytes inserted", v, len(got), len(big))
	}
	if _, err := db.Exec(ctx, `SELECT setval('toasty_n_seq', 100)`); err != nil {
		t.Fatal(err)
	}
	deliver(event(t, "toasty", 0x4000002, pluginkit.OpTruncate, `null`, map[string]any{"cascade": false, "restart_identity": true}))
	var rows, next int
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM toasty), nextval('toasty_n_seq')`).Scan(&rows, &next); err != nil {
		t.Fatal(err)
	}
	if rows != 0 || next != 1 {
		t.Fatalf("after TRUNCATE ... RESTART IDENTITY: %d rows, sequence at %d; want 0 and 1", rows, next)
	}
}

// TestDocumentedGrants runs mirror mode as a role holding only what
// docs/sinks.md lists: SELECT, INSERT, UPDATE, DELETE and TRUNCATE on the
// target table, CREATE on the schema (for the checkpoint table).
func TestDocumentedGrants(t *testing.T) {
	dsn := cluster.Database(t)
	db := connect(t, dsn)
	ctx := context.Background()
	role := fmt.Sprintf("mirror_writer_%d", time.Now().UnixNano()%1e9)
	for _, sql := range []string{
		`CREATE TABLE granted (id int PRIMARY KEY, v int)`,
		`CREATE ROLE ` + role + ` LOGIN`,
		`GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON granted TO ` + role,
		`GRANT CREATE ON SCHEMA public TO ` + role,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	asRole := strings.Replace(dsn, "postgres://postgres@", "postgres://"+role+"@", 1)
	if asRole == dsn {
		t.Fatalf("cannot set the user in %s", dsn)
	}
	s := openSink(t, map[string]any{"dsn": asRole, "create_tables": false})
	batch := []pluginkit.Event{
		rowEvent(t, "granted", 0x6000000, 0, 1, 1),
		rowEvent(t, "granted", 0x6000000, 1, 2, 1),
		event(t, "granted", 0x6000001, pluginkit.OpUpdate, `{"id":1}`, map[string]any{"new": map[string]int{"id": 1, "v": 5}}),
		event(t, "granted", 0x6000002, pluginkit.OpDelete, `{"id":2}`, map[string]any{"old": map[string]int{"id": 2}}),
	}
	batch[2].ID.Index, batch[3].ID.Index = 0, 0
	if _, err := s.Deliver(ctx, pluginkit.Batch{Events: batch}); err != nil {
		t.Fatal(err)
	}
	var n, v int
	if err := db.QueryRow(ctx, `SELECT count(*), max(v) FROM granted`).Scan(&n, &v); err != nil || n != 1 || v != 5 {
		t.Fatalf("granted holds %d rows, v %d (%v); want 1 row, v 5", n, v, err)
	}
	if _, err := s.Deliver(ctx, pluginkit.Batch{Events: []pluginkit.Event{event(t, "granted", 0x6000003, pluginkit.OpTruncate, `null`, nil)}}); err != nil {
		t.Fatal(err)
	}
}

// TestSchemaEventChangesNoRow: a schema event is resolved in mirror mode
// without a write and without refusing it (docs/sinks.md): the rows stay,
// the checkpoint moves past it, and the row after it in the new shape
// gets its new column added (create_tables).
func TestSchemaEventChangesNoRow(t *testing.T) {
	dsn := cluster.Database(t)
	db := connect(t, dsn)
	ctx := context.Background()
	s := openSink(t, map[string]any{"dsn": dsn, "create_tables": true})
	deliver := func(e pluginkit.Event) {
		t.Helper()
		if _, err := s.Deliver(ctx, pluginkit.Batch{Events: []pluginkit.Event{e}}); err != nil {
			t.Fatalf("deliver %s %s: %v", e.Op, e.ID, err)
		}
	}
	deliver(event(t, "shaped", 0x5000000, pluginkit.OpInsert, `{"id":1}`, map[string]any{"new": map[string]any{"id": 1, "v": 1}}))
	deliver(event(t, "shaped", 0x5000001, pluginkit.OpSchema, `null`, map[string]any{"columns": []map[string]any{{"name": "id"}, {"name": "v"}, {"name": "w"}}}))
	deliver(event(t, "shaped", 0x5000002, pluginkit.OpInsert, `{"id":2}`, map[string]any{"new": map[string]any{"id": 2, "v": 2, "w": 3}}))
	var n int
	var w *string
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM public.shaped), (SELECT w::text FROM public.shaped WHERE id = '2'::jsonb)`).Scan(&n, &w); err != nil {
		t.Fatal(err)
	}
	if n != 2 || w == nil || *w != "3" {
		t.Fatalf("after insert, schema event, insert: %d rows, w = %v; want 2 rows and w = 3", n, w)
	}
}

// TestDetachEventChangesNoRow: a partition's detach event (on_detach =
// "event") is resolved in mirror mode without a write and without
// refusing it (docs/sinks.md): the rows stay, and the next row applies.
func TestDetachEventChangesNoRow(t *testing.T) {
	dsn := cluster.Database(t)
	db := connect(t, dsn)
	ctx := context.Background()
	s := openSink(t, map[string]any{"dsn": dsn, "create_tables": true})
	for _, e := range []pluginkit.Event{
		event(t, "parted", 0x5000000, pluginkit.OpInsert, `{"id":1}`, map[string]any{"new": map[string]any{"id": 1}}),
		event(t, "parted", 0x5000001, pluginkit.OpDetach, `null`, map[string]any{"partition": "public.parted_p1", "rows": 1}),
		event(t, "parted", 0x5000002, pluginkit.OpInsert, `{"id":2}`, map[string]any{"new": map[string]any{"id": 2}}),
	} {
		if _, err := s.Deliver(ctx, pluginkit.Batch{Events: []pluginkit.Event{e}}); err != nil {
			t.Fatalf("deliver %s %s: %v", e.Op, e.ID, err)
		}
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM public.parted`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("after insert, detach, insert: %d rows, want 2", n)
	}
}

// TestNewEpochAppliesBelowCheckpoint: after a failover the new primary's
// ids can be lower than the checkpoint (pluginkit.Batch.Epoch). A batch of
// a new epoch is applied whole and moves the checkpoint down with its
// epoch, in its transaction: a reopened sink reports both and skips that
// batch's redelivery. A checkpoint table an older sink created (no epoch
// column) is upgraded, and its checkpoint, of no epoch, filters as before.
func TestNewEpochAppliesBelowCheckpoint(t *testing.T) {
	dsn := cluster.Database(t)
	db := connect(t, dsn)
	ctx := context.Background()
	for _, sql := range []string{
		`CREATE TABLE epochs (id int PRIMARY KEY, v int)`,
		// As an older sink left it.
		`CREATE TABLE walcast_checkpoints (key text PRIMARY KEY, event_id text NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())`,
		`INSERT INTO walcast_checkpoints (key, event_id) VALUES ('p/mirror', '0/3000000:4')`,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	batch := func(lsn uint64, v int) []pluginkit.Event {
		evs := make([]pluginkit.Event, 5)
		for i := range evs {
			evs[i] = rowEvent(t, "epochs", lsn, i, i+1, v)
		}
		return evs
	}
	deliverIn := func(s *Sink, epoch string, evs []pluginkit.Event) int {
		t.Helper()
		dctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		res, err := s.Deliver(dctx, pluginkit.Batch{Events: evs, Epoch: epoch})
		if err != nil {
			t.Fatal(err)
		}
		return res.Duplicates
	}
	sum := func() (n int) {
		t.Helper()
		if err := db.QueryRow(ctx, `SELECT coalesce(sum(v), 0) FROM epochs`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	cfg := map[string]any{"dsn": dsn, "create_tables": false}
	s := openSink(t, cfg)
	if d := deliverIn(s, "A", batch(0x2000000, 1)); d != 5 || sum() != 0 {
		t.Fatalf("epoch A below a checkpoint of no epoch: %d duplicates, sum %d; want 5 and nothing applied", d, sum())
	}
	deliverIn(s, "A", batch(0x4000000, 2))
	s.Close(ctx)

	s = openSink(t, cfg)
	if d := deliverIn(s, "B", batch(0x1000000, 3)); d != 0 || sum() != 15 {
		t.Fatalf("the first batch of epoch B, below A's checkpoint: %d duplicates, sum %d; want none and every row applied (15)", d, sum())
	}
	res, err := s.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Epoch != "B" || res.Checkpoint != (pluginkit.EventID{CommitLSN: 0x1000000, Index: 4}) {
		t.Fatalf("Open after epoch B's first batch reported %s of epoch %q, want 0/1000000:4 of epoch B", res.Checkpoint, res.Epoch)
	}
	if d := deliverIn(s, "B", batch(0x1000000, 4)); d != 5 || sum() != 15 {
		t.Fatalf("epoch B's first batch again: %d duplicates, sum %d; want 5 and nothing applied", d, sum())
	}
	if d := deliverIn(s, "", batch(0x1000000, 4)); d != 5 {
		t.Fatalf("the same batch from a host without epochs: %d duplicates, want 5", d)
	}
}
