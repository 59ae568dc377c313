package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/pluginkit"
)

// shapeCol is a column as a schema event lists it and as pg_attribute
// says it (the type's name is left out: the OID and modifier are what
// the catalog compares on).
type shapeCol struct {
	Name         string `json:"name"`
	TypeOID      uint32 `json:"type_oid"`
	TypeModifier int32  `json:"type_modifier"`
	Key          bool   `json:"key"`
}

// tableShape is a table's shape as a schema event describes it.
type tableShape struct {
	Columns         []shapeCol `json:"columns"`
	ReplicaIdentity string     `json:"replica_identity"`
}

// schemaEvent is the part of a schema event the tests read.
type schemaEvent struct {
	tableShape
	Before  tableShape `json:"before"`
	Changes []struct {
		Change, Column, From string
	} `json:"changes"`
}

// catalogShape reads a table's shape from the catalog: its live columns
// in order, each one's type and modifier, whether it is in the replica
// identity (the primary key by default, every column with FULL), and the
// replica identity.
func catalogShape(t testing.TB, db *pgx.Conn, table string) tableShape {
	t.Helper()
	ctx := context.Background()
	rows, err := db.Query(ctx, `
SELECT a.attname::text, a.atttypid::int8, a.atttypmod, c.relreplident = 'f' OR coalesce(a.attnum = ANY(i.indkey), false)
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, table)
	if err != nil {
		t.Fatal(err)
	}
	var s tableShape
	var c shapeCol
	var oid int64
	if _, err := pgx.ForEachRow(rows, []any{&c.Name, &oid, &c.TypeModifier, &c.Key}, func() error {
		c.TypeOID = uint32(oid)
		s.Columns = append(s.Columns, c)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var ident string
	if err := db.QueryRow(ctx, `SELECT relreplident::text FROM pg_class WHERE oid = $1::regclass`, table).Scan(&ident); err != nil {
		t.Fatal(err)
	}
	s.ReplicaIdentity = map[string]string{"d": "default", "f": "full", "n": "nothing", "i": "index"}[ident]
	return s
}

// TestSchemaEventsMidStream: while two writers change rows without pause,
// the table gains a column with a default and one without, loses one,
// has a column's type modifier and another's type changed, a column
// renamed and its replica identity set to FULL; walcast is SIGKILLed and
// restarted half-way. Two sinks (row order, many batches in flight; strict
// order) each get one schema event per step: its columns and replica
// identity are the catalog's right after the step, its "before" the
// catalog's before it; it arrives after every row in the old shape and
// before every row in the new one; a redelivered copy is byte-identical;
// every committed change arrives (test_decoding is the truth); and a
// consumer that keeps its copy's columns by the schema events and merges
// the rows' values ends equal to the table, every column.
func TestSchemaEventsMidStream(t *testing.T) {
	parallel(t)
	dsn, db := newSource(t,
		`CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, note text, label varchar(10))`,
		`INSERT INTO items SELECT g, 0, 'n', 'l' FROM generate_series(1, 200) g`,
	)
	truthSlot(t, dsn, db, "truth_shapes")
	lanes, strict := newReceiver(t), newReceiver(t)
	p := writePipeline(t, "shapes", dsn, []string{"public.items"},
		sinkSpec{ID: "lanes", URL: lanes.URL, Batch: 5, Extra: "    max_in_flight = 8\n"},
		sinkSpec{ID: "strict", URL: strict.URL, Batch: 50, Extra: "    ordering = \"strict\"\n"})
	w := startCapturing(t, db, p)
	w.waitLog(t, "streaming from slot")
	initial := catalogShape(t, db, "public.items")

	writes, stop := schemaWriters(t, dsn)
	steps := []string{
		`ALTER TABLE items ADD COLUMN extra int NOT NULL DEFAULT 7`,
		`ALTER TABLE items ADD COLUMN plain text`,
		`ALTER TABLE items DROP COLUMN note`,
		`ALTER TABLE items ALTER COLUMN label TYPE varchar(40)`,
		`ALTER TABLE items ALTER COLUMN v TYPE bigint`,
		`ALTER TABLE items RENAME COLUMN extra TO extra2`,
		`ALTER TABLE items REPLICA IDENTITY FULL`,
	}
	var shapes []tableShape
	for i, step := range steps {
		before := writes.Load()
		waitFor(t, "writes before "+step, time.Minute, func() bool { return writes.Load() >= before+40 })
		exec1(t, db, step)
		shapes = append(shapes, catalogShape(t, db, "public.items"))
		if i == 3 {
			// Killed with schema events delivered and others not yet
			// decoded: the restart reads the stream again from the slot.
			before := writes.Load()
			waitFor(t, "writes before the kill", time.Minute, func() bool { return writes.Load() >= before+40 })
			w.kill()
			w = startWalcast(t, p)
		}
	}
	before := writes.Load()
	waitFor(t, "writes after the last step", time.Minute, func() bool { return writes.Load() >= before+40 })
	stop()
	// pgoutput carries no default: rows no writer touched since ADD
	// COLUMN … DEFAULT hold a value no change has sent. One more write
	// of every row brings each copy every value.
	exec1(t, db, `UPDATE items SET v = v + 1`)

	want := truth(t, db, "truth_shapes", map[string]bool{"public.items": true})
	for _, r := range []*receiver{lanes, strict} {
		waitFor(t, fmt.Sprintf("%d changes", len(want)), 2*time.Minute, func() bool { return r.distinct() >= len(want)+len(steps) })
	}
	w.stop()
	for name, r := range map[string]*receiver{"lanes": lanes, "strict": strict} {
		evs := r.events()
		verify(t, want, evs)
		checkSchemaEvents(t, name, evs, initial, shapes)
		checkShapeOrder(t, name, evs, initial)
		checkRebuiltCopy(t, db, name, evs)
	}
	checkSchemaEventDoc(t, lanes.events())
	t.Logf("%d writes, %d changes, %d schema events per sink", writes.Load(), len(want), len(steps))
}

// checkSchemaEventDoc: the example in docs/events.md has the fields of
// a real schema event, in its order, and a shape with the fields of a
// real one.
func checkSchemaEventDoc(t *testing.T, evs []received) {
	t.Helper()
	var real received
	for _, r := range evs {
		if r.Op == string(pluginkit.OpSchema) {
			real = r
		}
	}
	for _, b := range docBlocks(t) {
		if b.file != "events.md" || b.lang != "json" || !strings.Contains(b.text, `"op":"schema"`) {
			continue
		}
		if got, want := jsonKeys(t, strings.TrimSpace(b.text)), jsonKeys(t, string(real.Raw)); !slices.Equal(got, want) {
			t.Errorf("events.md:%d: the example has fields %v, a schema event %v", b.line, got, want)
		}
		var doc, ev struct {
			Before map[string]json.RawMessage `json:"before"`
		}
		if json.Unmarshal([]byte(b.text), &doc) != nil || json.Unmarshal(real.Raw, &ev) != nil ||
			!slices.Equal(slices.Sorted(maps.Keys(doc.Before)), slices.Sorted(maps.Keys(ev.Before))) {
			t.Errorf("events.md:%d: the example's before has fields %v, a schema event's %v", b.line, slices.Sorted(maps.Keys(doc.Before)), slices.Sorted(maps.Keys(ev.Before)))
		}
		return
	}
	t.Error("docs/events.md has no schema event example")
}

// schemaWriters starts two writers that insert, update and delete rows
// of items, touching only id and v (which every step keeps); stop ends
// them and fails the test if one failed. A writer finishes the statement
// it is in: a statement cancelled mid-flight could still commit after
// the truth was read.
func schemaWriters(t *testing.T, dsn string) (writes *atomic.Int64, stop func()) {
	var done atomic.Bool
	var wg sync.WaitGroup
	writes = new(atomic.Int64)
	errs := make(chan error, 2)
	for wr := 0; wr < 2; wr++ {
		c := connect(t, dsn)
		wg.Go(func() {
			ctx := context.Background()
			for i := 0; !done.Load(); i++ {
				id := 1 + (i*7+wr*101)%400
				var err error
				switch i % 3 {
				case 0:
					_, err = c.Exec(ctx, `INSERT INTO items (id, v) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET v = items.v + 1`, id, i)
				case 1:
					_, err = c.Exec(ctx, `UPDATE items SET v = v + 1 WHERE id = $1`, id)
				case 2:
					_, err = c.Exec(ctx, `DELETE FROM items WHERE id = $1`, id+200)
				}
				if err != nil {
					errs <- fmt.Errorf("writer %d: %w", wr, err)
					return
				}
				writes.Add(1)
			}
		})
	}
	t.Cleanup(func() { done.Store(true); wg.Wait() })
	return writes, func() {
		t.Helper()
		done.Store(true)
		wg.Wait()
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
	}
}

// firstCopies is evs without redelivered copies, in arrival order.
func firstCopies(evs []received) []received {
	seen := map[pluginkit.EventID]bool{}
	var out []received
	for _, r := range evs {
		if !seen[r.ID] {
			seen[r.ID] = true
			out = append(out, r)
		}
	}
	return out
}

func parseSchemaEvent(t testing.TB, r received) schemaEvent {
	t.Helper()
	var e schemaEvent
	if err := json.Unmarshal(r.Raw, &e); err != nil {
		t.Fatalf("schema event %s: %v: %s", r.ID, err, r.Raw)
	}
	return e
}

// checkSchemaEvents: one schema event per step, in step order, each with
// the catalog's shape after its step and before it.
func checkSchemaEvents(t *testing.T, sink string, evs []received, initial tableShape, shapes []tableShape) {
	t.Helper()
	var got []received
	for _, r := range firstCopies(evs) {
		if r.Op == string(pluginkit.OpSchema) {
			got = append(got, r)
		}
	}
	sort.Slice(got, func(i, j int) bool { return got[i].ID.Compare(got[j].ID) < 0 })
	if len(got) != len(shapes) {
		t.Fatalf("%s: %d schema events, want one per step (%d)", sink, len(got), len(shapes))
	}
	prev := initial
	for i, r := range got {
		e := parseSchemaEvent(t, r)
		if !reflect.DeepEqual(e.tableShape, shapes[i]) {
			t.Errorf("%s: schema event %s (step %d): %+v, the catalog said %+v", sink, r.ID, i+1, e.tableShape, shapes[i])
		}
		if !reflect.DeepEqual(e.Before, prev) {
			t.Errorf("%s: schema event %s (step %d): before %+v, the catalog said %+v", sink, r.ID, i+1, e.Before, prev)
		}
		if len(e.Changes) == 0 {
			t.Errorf("%s: schema event %s (step %d) lists no change: %s", sink, r.ID, i+1, r.Raw)
		}
		prev = shapes[i]
	}
}

// checkShapeOrder: in arrival order, every inserted or updated row has
// exactly the columns of the last schema event that arrived before it.
func checkShapeOrder(t *testing.T, sink string, evs []received, initial tableShape) {
	t.Helper()
	names := func(cols []shapeCol) []string {
		var out []string
		for _, c := range cols {
			out = append(out, c.Name)
		}
		sort.Strings(out)
		return out
	}
	current, since := names(initial.Columns), "the start"
	for _, r := range firstCopies(evs) {
		switch r.Op {
		case string(pluginkit.OpSchema):
			current, since = names(parseSchemaEvent(t, r).Columns), "schema event "+r.ID.String()
		case string(pluginkit.OpInsert), string(pluginkit.OpUpdate):
			cols := slices.Sorted(maps.Keys(parseFull(t, r).New))
			if !slices.Equal(cols, current) {
				t.Fatalf("%s: %s %s has columns %v, but the last schema event to arrive (%s) said %v", sink, r.Op, r.ID, cols, since, current)
			}
		}
	}
}

// checkRebuiltCopy applies evs the way a consumer keeping a copy with
// its own columns does: a schema event renames, drops and adds columns
// of every row it holds (an added column is null until a row brings its
// value), a row event merges its values into the row. The copy must end
// equal to the table.
func checkRebuiltCopy(t *testing.T, db *pgx.Conn, sink string, evs []received) {
	t.Helper()
	copyRows := map[string]map[string]any{}
	for _, r := range firstCopies(evs) {
		switch r.Op {
		case string(pluginkit.OpSchema):
			reshape(copyRows, parseSchemaEvent(t, r))
		case string(pluginkit.OpDelete):
			delete(copyRows, rowKey(parseFull(t, r).Old, []string{"id"}))
		default:
			e := parseFull(t, r)
			k := rowKey(e.New, []string{"id"})
			if copyRows[k] == nil {
				copyRows[k] = map[string]any{}
			}
			maps.Copy(copyRows[k], e.New)
		}
	}
	table := tableRowsByKey(t, db, "public.items", []string{"id"})
	if len(copyRows) != len(table) {
		t.Errorf("%s: the copy has %d rows, the table %d", sink, len(copyRows), len(table))
	}
	bad := 0
	for k, row := range table {
		if !reflect.DeepEqual(copyRows[k], row) {
			if bad++; bad <= 5 {
				t.Errorf("%s: row %s: the copy has %v, the table %v", sink, k, copyRows[k], row)
			}
		}
	}
}

// reshape gives every row of a copy the columns a schema event lists.
func reshape(rows map[string]map[string]any, e schemaEvent) {
	for _, row := range rows {
		for _, c := range e.Changes {
			if c.Change == "rename_column" {
				row[c.Column] = row[c.From]
				delete(row, c.From)
			}
		}
		keep := map[string]bool{}
		for _, c := range e.Columns {
			keep[c.Name] = true
			if _, ok := row[c.Name]; !ok {
				row[c.Name] = nil
			}
		}
		for name := range row {
			if !keep[name] {
				delete(row, name)
			}
		}
	}
}

// TestTableVanishedMidStream: a captured table renamed, or dropped, while
// walcast streams. walcast stops as it always has (the rename or the drop
// took the table out of what the pipeline captures), but first every sink
// gets a schema event under the name the pipeline lists, after the
// table's earlier changes: rename_table with the new name and the columns,
// or drop_table with no columns; "before" is the shape last known.
func TestTableVanishedMidStream(t *testing.T) {
	for _, tc := range []struct {
		name, ddl, change, exit string
	}{
		{"renamed", `ALTER TABLE items RENAME TO goods`, `{"change":"rename_table","from":"public.items","to":"public.goods"}`, "is no longer published by publication walcast_vanish_renamed under the name the pipeline lists"},
		{"dropped", `DROP TABLE items`, `{"change":"drop_table"}`, "is no longer published by publication walcast_vanish_dropped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v text)`, `CREATE TABLE other (id int PRIMARY KEY)`)
			rcv := newReceiver(t)
			p := writePipeline(t, "vanish_"+tc.name, dsn, []string{"public.items", "public.other"}, sinkSpec{ID: "hook", URL: rcv.URL, Batch: 3})
			w := startCapturing(t, db, p, "--slot-check-interval", "200ms")
			w.waitLog(t, "streaming from slot")
			exec1(t, db, `INSERT INTO items SELECT g, 'v' FROM generate_series(1, 20) g`)
			exec1(t, db, `INSERT INTO other VALUES (1)`)
			exec1(t, db, tc.ddl)
			w.waitExit1(t, time.Minute, "its table "+tc.name)
			wantAll(t, w.logText(), tc.exit)

			var schema *received
			items := 0
			for _, r := range firstCopies(rcv.events()) {
				switch {
				case r.Op == string(pluginkit.OpSchema):
					if schema != nil {
						t.Fatalf("two schema events: %s and %s", schema.Raw, r.Raw)
					}
					schema = &r
				case r.Table == "items":
					if schema != nil {
						t.Errorf("%s %s of items arrived after the schema event saying it was %s", r.Op, r.ID, tc.name)
					}
					items++
				}
			}
			if schema == nil || items != 20 {
				t.Fatalf("%d of 20 inserts of items, and schema event %v", items, schema)
			}
			var e struct {
				Schema, Table string
				Columns       []shapeCol
				Before        struct {
					Table   string
					Columns []shapeCol
				}
				Changes []json.RawMessage
			}
			if err := json.Unmarshal(schema.Raw, &e); err != nil {
				t.Fatal(err)
			}
			wantCols := 0
			if tc.name == "renamed" {
				wantCols = 2
			}
			if e.Schema != "public" || e.Table != "items" || len(e.Columns) != wantCols || len(e.Before.Columns) != 2 ||
				e.Before.Table != "items" || len(e.Changes) != 1 || string(e.Changes[0]) != tc.change {
				t.Errorf("schema event: %s", schema.Raw)
			}
		})
	}
}

// TestDDLEventsWithoutWrite: with ddl_events = true, an ADD COLUMN that
// no write follows still reaches the sink as a schema event, at the
// command's commit, with the command tag, the statement and the columns
// pg_attribute has; the table's next write brings no second one; a
// command that changes no shape (SET DEFAULT) brings none; teardown
// removes the event trigger.
func TestDDLEventsWithoutWrite(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v text)`)
	rcv := newReceiver(t)
	p := writePipeline(t, "ddlev", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL})
	withDDLEvents(t, p)
	w := startCapturing(t, db, p)
	w.waitLog(t, "streaming from slot")
	var installed bool
	if err := db.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'walcast_ddl_ddlev')`).Scan(&installed); err != nil || !installed {
		t.Fatalf("event trigger walcast_ddl_ddlev installed: %v, %v", installed, err)
	}
	exec1(t, db, `INSERT INTO items VALUES (1, 'a')`)
	exec1(t, db, `ALTER TABLE items ADD COLUMN c int`)
	want := catalogShape(t, db, "public.items")
	waitFor(t, "the schema event of the ADD COLUMN", 15*time.Second, func() bool { return rcv.distinct() >= 2 })
	exec1(t, db, `ALTER TABLE items ALTER COLUMN c SET DEFAULT 5`)
	exec1(t, db, `INSERT INTO items (id, v) VALUES (2, 'b')`)
	waitFor(t, "the insert after it", time.Minute, func() bool { return rcv.distinct() >= 3 })
	w.stop()

	evs := firstCopies(rcv.events())
	if len(evs) != 3 || evs[0].Op != "insert" || evs[1].Op != "schema" || evs[2].Op != "insert" {
		var ops []string
		for _, e := range evs {
			ops = append(ops, e.Op)
		}
		t.Fatalf("events %v, want insert, schema, insert", ops)
	}
	e := parseSchemaEvent(t, evs[1])
	var ddl struct {
		DDL struct {
			CommandTag string `json:"command_tag"`
			Statement  string `json:"statement"`
		} `json:"ddl"`
	}
	json.Unmarshal(evs[1].Raw, &ddl)
	if !reflect.DeepEqual(e.tableShape, want) || ddl.DDL.CommandTag != "ALTER TABLE" || ddl.DDL.Statement != `ALTER TABLE items ADD COLUMN c int` ||
		len(e.Changes) != 1 || e.Changes[0].Change != "add_column" || e.Changes[0].Column != "c" {
		t.Errorf("schema event %s; the catalog says %+v", evs[1].Raw, want)
	}
	if got := parseFull(t, evs[2]).New; got["c"] != 5.0 {
		t.Errorf("insert after the DDL: %v, want c = 5", got)
	}

	if out, err := walcastCLI(t, "teardown", p, "--yes"); err != nil || !strings.Contains(out, `dropped event trigger "walcast_ddl_ddlev"`) {
		t.Fatalf("teardown: %v\n%s", err, out)
	}
	if err := db.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'walcast_ddl_ddlev')
		OR EXISTS (SELECT 1 FROM pg_proc WHERE proname = 'walcast_ddl_ddlev')`).Scan(&installed); err != nil || installed {
		t.Fatalf("event trigger or its function still there after teardown: %v, %v", installed, err)
	}
}

// withDDLEvents sets ddl_events = true in the source block of the
// pipeline file at path.
func withDDLEvents(t testing.TB, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "]\n}\n", "]\n  ddl_events = true\n}\n", 1)
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDDLEventsNeedASuperuser: a role that is not a superuser cannot
// create ddl_events' event trigger; the start refuses before creating
// anything and says what to do, and once a superuser's start installed
// the trigger, the same role starts.
func TestDDLEventsNeedASuperuser(t *testing.T) {
	dsn, admin := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v text)`)
	role := newRole(t, admin, dsn, "walcast_ddlsu", "REPLICATION")
	exec1(t, admin, fmt.Sprintf("GRANT CREATE ON DATABASE %s TO %s; ALTER TABLE items OWNER TO %s", pgx.Identifier{dbName(t, dsn)}.Sanitize(), role.Name, role.Name))
	rcv := newReceiver(t)
	p := writePipeline(t, "ddlsu", role.DSN, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL})
	withDDLEvents(t, p)
	_, stderr, code := walcastTimed(t, time.Minute, nil, "run", p)
	want := "ddl_events = true needs event trigger walcast_ddl_ddlsu, which only a superuser may create, and role " + role.Name + " is not one"
	if code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "set ddl_events = false") {
		t.Fatalf("walcast run as %s with ddl_events: exit %d\n%s\nwant exit 1 and %q", role.Name, code, stderr, want)
	}
	// A superuser installs it (here, by hand as the admin would, through
	// a start of the same pipeline with the admin's dsn).
	asAdmin := writePipeline(t, "ddlsu", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL})
	withDDLEvents(t, asAdmin)
	w := startCapturing(t, admin, asAdmin)
	w.waitLog(t, "streaming from slot")
	w.stop()
	exec1(t, admin, `GRANT USAGE ON SCHEMA walcast TO `+role.Name+`;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA walcast TO `+role.Name+`;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA walcast TO `+role.Name+`;
ALTER PUBLICATION walcast_ddlsu OWNER TO `+role.Name)
	w = startWalcast(t, p)
	w.waitLog(t, "streaming from slot")
	w.stop()
}
