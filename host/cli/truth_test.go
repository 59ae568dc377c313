package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/pluginkit"
)

// What arrived, checked against what was committed. test_decoding,
// PostgreSQL's own decoder and independent of walcast, is the truth of
// "every committed change" (truth, verify); a mirror applies what a sink
// received the way a consumer would and is compared with the tables.

// change is one committed row change as test_decoding saw it.
type change struct {
	Xid   uint32
	Index int
	Table string
	Op    string
	Key   string // {"id":N}
}

var (
	tdBegin    = regexp.MustCompile(`^BEGIN (\d+)$`)
	tdTruncate = regexp.MustCompile(`^table (.+): TRUNCATE:`)
	tdChange   = regexp.MustCompile(`^table ([^ ]+): (INSERT|UPDATE|DELETE|TRUNCATE):(?: id\[[a-z]+\]:(-?\d+))?`)
)

// truthSlot creates a test_decoding slot before a workload; truth reads it
// afterwards. test_decoding is PostgreSQL's own decoder, independent of
// walcast, so it is the reference for "every committed change". Slots are
// cluster-wide: the slot is dropped when the test ends, so that the test
// can run again (-count) against the shared cluster.
func truthSlot(t testing.TB, dsn string, db *pgx.Conn, slot string) {
	t.Helper()
	exec1(t, db, `SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, slot)
	t.Cleanup(func() { dropSlot(dsn, slot) })
}

func truth(t testing.TB, db *pgx.Conn, slot string, tables map[string]bool) []change {
	t.Helper()
	rows, err := db.Query(context.Background(),
		`SELECT data FROM pg_logical_slot_peek_changes($1, NULL, NULL, 'include-xids', '1', 'skip-empty-xacts', '1')`, slot)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []change
	var xid uint32
	idx := 0
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		if m := tdBegin.FindStringSubmatch(line); m != nil {
			x, _ := strconv.ParseUint(m[1], 10, 32)
			xid, idx = uint32(x), 0
			continue
		}
		if m := tdTruncate.FindStringSubmatch(line); m != nil {
			// One TRUNCATE naming several tables: one change per table.
			for _, tb := range strings.Split(m[1], ", ") {
				if tables[tb] {
					out = append(out, change{Xid: xid, Index: idx, Table: tb[strings.IndexByte(tb, '.')+1:], Op: "truncate", Key: "null"})
					idx++
				}
			}
			continue
		}
		if i, j := strings.Index(line, " old-key: "), strings.Index(line, " new-tuple: "); i >= 0 && j > i {
			// An update with REPLICA IDENTITY FULL, or one that changed
			// the key: the event's key is the new tuple's.
			line = line[:i] + line[j+len(" new-tuple:"):]
		}
		m := tdChange.FindStringSubmatch(line)
		if m == nil || !tables[m[1]] {
			continue
		}
		c := change{Xid: xid, Index: idx, Table: m[1][strings.IndexByte(m[1], '.')+1:], Op: strings.ToLower(m[2])}
		if m[3] != "" {
			c.Key = `{"id":` + m[3] + `}`
		} else {
			c.Key = "null"
		}
		out = append(out, c)
		idx++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// verify compares what a receiver got with the ground truth: every change
// arrived at least once with the matching table, op and key; nothing else
// arrived; every copy of an id is byte-identical; and the first deliveries
// of each row arrived in commit order. It returns the number of duplicate
// deliveries.
func verify(t testing.TB, want []change, got []received) (dups int) {
	t.Helper()
	type txIdx struct {
		xid uint32
		idx uint64
	}
	expect := make(map[txIdx]change, len(want))
	for _, c := range want {
		expect[txIdx{c.Xid, uint64(c.Index)}] = c
	}
	got, shift := withoutSchemaEvents(t, got)
	first := map[pluginkit.EventID]received{}
	idOf := map[txIdx]pluginkit.EventID{}
	var order []received
	for _, r := range got {
		k := txIdx{r.Xid, r.ID.Index - shift[r.ID]}
		c, ok := expect[k]
		if !ok {
			t.Fatalf("received %s (xid %d, %s %s %s) that is not a committed change", r.ID, r.Xid, r.Table, r.Op, r.Key)
		}
		if c.Table != r.Table || c.Op != r.Op || c.Key != r.Key {
			t.Fatalf("event %s: got %s %s key %s, committed change was %s %s key %s", r.ID, r.Table, r.Op, r.Key, c.Table, c.Op, c.Key)
		}
		if prev, ok := idOf[k]; ok && prev != r.ID {
			t.Fatalf("xid %d change %d delivered with two ids: %s and %s", r.Xid, r.ID.Index, prev, r.ID)
		}
		idOf[k] = r.ID
		if f, ok := first[r.ID]; ok {
			dups++
			if !bytes.Equal(f.Raw, r.Raw) {
				t.Fatalf("event %s redelivered with different bytes:\n%s\n%s", r.ID, f.Raw, r.Raw)
			}
			continue
		}
		first[r.ID] = r
		order = append(order, r)
	}
	if len(first) != len(want) {
		missing := 0
		for k, c := range expect {
			if _, ok := idOf[k]; !ok {
				if missing < 5 {
					t.Errorf("missing: xid %d change %d (%s %s %s)", c.Xid, c.Index, c.Table, c.Op, c.Key)
				}
				missing++
			}
		}
		t.Fatalf("%d of %d committed changes never arrived", missing, len(want))
	}
	last := map[string]pluginkit.EventID{}
	for _, r := range order {
		row := r.Table + r.Key
		if prev, ok := last[row]; ok && r.ID.Compare(prev) <= 0 {
			t.Fatalf("row %s: first delivery of %s came after %s", row, r.ID, prev)
		}
		last[row] = r.ID
	}
	return dups
}

// withoutSchemaEvents takes the schema events out of got, after checking
// that every copy of one is byte-identical. test_decoding knows nothing of
// them, yet each takes an index in its transaction: shift says, for each
// other event, how many schema events of its transaction come before it,
// so that its index minus the shift is test_decoding's.
func withoutSchemaEvents(t testing.TB, got []received) (rest []received, shift map[pluginkit.EventID]uint64) {
	t.Helper()
	schemas := map[pluginkit.EventID][]byte{}
	for _, r := range got {
		if r.Op != string(pluginkit.OpSchema) {
			rest = append(rest, r)
			continue
		}
		if f, ok := schemas[r.ID]; ok && !bytes.Equal(f, r.Raw) {
			t.Fatalf("schema event %s redelivered with different bytes:\n%s\n%s", r.ID, f, r.Raw)
		}
		schemas[r.ID] = r.Raw
	}
	shift = map[pluginkit.EventID]uint64{}
	for _, r := range rest {
		if _, done := shift[r.ID]; done {
			continue // a redelivered copy
		}
		shift[r.ID] = 0
		for id := range schemas {
			if id.CommitLSN == r.ID.CommitLSN && id.Index < r.ID.Index {
				shift[r.ID]++
			}
		}
	}
	return rest, shift
}

// keysOf returns the set of {"id":N} keys in a list of changes.
func keysOf[T any](xs []T, key func(T) string) map[string]bool {
	m := map[string]bool{}
	for _, x := range xs {
		m[key(x)] = true
	}
	return m
}

// missingKeys lists, in id order, the keys the truth has that arrived
// nowhere.
func missingKeys(want []change, got []received) []string {
	have := keysOf(got, func(r received) string { return r.Key })
	var out []string
	for _, c := range want {
		if !have[c.Key] {
			out = append(out, c.Key)
		}
	}
	return out
}

func itemKeys(from, n int) []string {
	var out []string
	for i := from; i < from+n; i++ {
		out = append(out, fmt.Sprintf(`{"id":%d}`, i))
	}
	return out
}

// mirror applies a stream of events, in the order a sink received them,
// to an in-memory copy of tables with columns (id int, v int): what a
// consumer replicating the stream would end up with.
type mirror map[string]map[int]int

func applyStream(t testing.TB, evs []received) mirror {
	t.Helper()
	m := mirror{}
	seen := map[string]bool{}
	for _, e := range evs {
		if seen[e.ID.String()] {
			continue // a redelivery: the consumer dedupes on the id
		}
		seen[e.ID.String()] = true
		var ev struct {
			New *struct{ ID, V int } `json:"new"`
			Old *struct{ ID int }    `json:"old"`
			Key *struct{ ID int }    `json:"key"`
		}
		if err := json.Unmarshal(e.Raw, &ev); err != nil {
			t.Fatalf("event %s: %v", e.ID, err)
		}
		tb := m[e.Table]
		if tb == nil {
			tb = map[int]int{}
			m[e.Table] = tb
		}
		switch e.Op {
		case "insert", "update", "read":
			tb[ev.New.ID] = ev.New.V
		case "delete":
			delete(tb, ev.Key.ID)
		case "truncate":
			clear(tb)
		default:
			t.Fatalf("event %s: op %s", e.ID, e.Op)
		}
	}
	return m
}

// tableRows reads a (id int, v int) table.
func tableRows(t testing.TB, db *pgx.Conn, table string) map[int]int {
	t.Helper()
	rows, err := db.Query(context.Background(), "SELECT id, v FROM "+table)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int{}
	for rows.Next() {
		var id, v int
		if err := rows.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		out[id] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkMirror compares the mirror of each table with the table and logs
// the row counts.
func checkMirror(t testing.TB, db *pgx.Conn, m mirror, tables ...string) {
	t.Helper()
	for _, tb := range tables {
		want := tableRows(t, db, "public."+tb)
		got := m[tb]
		t.Logf("table %s: %d rows, mirror %d rows", tb, len(want), len(got))
		if !maps.Equal(want, got) && !(len(want) == 0 && len(got) == 0) {
			t.Errorf("mirror of %s has %d rows, the table %d: the stream applied in order does not rebuild the table", tb, len(got), len(want))
		}
	}
}

// fullEvent is an event's row data as a consumer applies it.
type fullEvent struct {
	ID  pluginkit.EventID
	Op  string
	New map[string]any
	Old map[string]any
}

func parseFull(t testing.TB, r received) fullEvent {
	t.Helper()
	var e struct {
		Op  string         `json:"op"`
		New map[string]any `json:"new"`
		Old map[string]any `json:"old"`
	}
	if err := json.Unmarshal(r.Raw, &e); err != nil {
		t.Fatalf("event %s: %v", r.ID, err)
	}
	return fullEvent{ID: r.ID, Op: e.Op, New: e.New, Old: e.Old}
}

// rowKey renders a row's key columns.
func rowKey(row map[string]any, keyCols []string) string {
	parts := make([]string, len(keyCols))
	for i, c := range keyCols {
		parts[i] = fmt.Sprint(row[c])
	}
	return strings.Join(parts, "|")
}

// mirrorRows applies events in arrival order the way an idempotent consumer
// does: per row, an event at or below the last one applied is a redelivery
// and skipped; insert, update and read store the new row, delete removes it.
func mirrorRows(t testing.TB, evs []received, keyCols []string) map[string]map[string]any {
	t.Helper()
	rows := map[string]map[string]any{}
	applied := map[string]pluginkit.EventID{}
	for _, r := range evs {
		e := parseFull(t, r)
		var k string
		switch e.Op {
		case "insert", "update", "read":
			k = rowKey(e.New, keyCols)
		case "delete":
			k = rowKey(e.Old, keyCols)
		case "schema":
			continue // a change of shape alone changes no row
		default:
			t.Fatalf("event %s: unexpected op %q", e.ID, e.Op)
		}
		if last, ok := applied[k]; ok && e.ID.Compare(last) <= 0 {
			continue
		}
		applied[k] = e.ID
		if e.Op == "delete" {
			delete(rows, k)
		} else {
			rows[k] = e.New
		}
	}
	return rows
}

// tableRowsByKey reads a table as JSON objects keyed like mirror's rows.
func tableRowsByKey(t testing.TB, db *pgx.Conn, table string, keyCols []string) map[string]map[string]any {
	t.Helper()
	return tableRowsWhere(t, db, table, "", keyCols)
}

// tableRowsWhere reads the rows of table that where keeps (all when
// empty) as JSON objects keyed like mirror's rows.
func tableRowsWhere(t testing.TB, db *pgx.Conn, table, where string, keyCols []string) map[string]map[string]any {
	t.Helper()
	sql := `SELECT to_json(t)::text FROM ` + table + ` t`
	if where != "" {
		sql += " WHERE " + where
	}
	rows, err := db.Query(context.Background(), sql)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]map[string]any{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		var row map[string]any
		if err := json.Unmarshal([]byte(s), &row); err != nil {
			t.Fatal(err)
		}
		out[rowKey(row, keyCols)] = row
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkRowMirror fails unless applying evs leaves a mirror equal to table.
func checkRowMirror(t testing.TB, db *pgx.Conn, table string, keyCols []string, evs []received) {
	t.Helper()
	checkRowMirrorWhere(t, db, table, "", keyCols, evs)
}

// checkRowMirrorWhere fails unless applying evs leaves a mirror equal to
// the rows of table that where keeps.
func checkRowMirrorWhere(t testing.TB, db *pgx.Conn, table, where string, keyCols []string, evs []received) {
	t.Helper()
	diffs, want := mirrorDiff(t, db, table, where, keyCols, evs)
	for i, d := range diffs {
		if i == 5 {
			break
		}
		t.Error(d)
	}
	if len(diffs) > 0 {
		t.Fatalf("mirror of %s differs from the table in %d rows (%d rows in the table)", table, len(diffs), want)
	}
}

// mirrorDiff applies evs to a mirror and describes each row in which it
// differs from the rows of table that where keeps; want is how many rows
// those are.
func mirrorDiff(t testing.TB, db *pgx.Conn, table, where string, keyCols []string, evs []received) (diffs []string, want int) {
	t.Helper()
	got := mirrorRows(t, evs, keyCols)
	rows := tableRowsWhere(t, db, table, where, keyCols)
	for k, w := range rows {
		if g, ok := got[k]; !ok || !reflect.DeepEqual(g, w) {
			diffs = append(diffs, fmt.Sprintf("row %s: mirror has %v, table has %v", k, g, w))
		}
	}
	for k, g := range got {
		if _, ok := rows[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("row %s: mirror has %v, the table has no such row", k, g))
		}
	}
	return diffs, len(rows)
}
