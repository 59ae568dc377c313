package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walcast/walcast/host/pgtest"
	"github.com/walcast/walcast/pluginkit"
)

// ---- the marker contract, as a consumer keeps it --------------------------

// resyncMirror is a consumer that keeps a copy of tables with the
// contract of docs/guarantees.md ("Resync"): it applies the stream in
// arrival order (per row, an id at or below the last one applied is a
// redelivery), and at a resync_end removes every row of the table it has
// not seen since the resync_begin (seen: an event of the row with a
// greater id than the begin marker's, redelivered or not). sweep = false
// is the same consumer ignoring the markers, to show what they change.
type resyncMirror struct {
	keyCols []string
	sweep   bool
	rows    map[string]map[string]map[string]any // table → key → row
	applied map[string]pluginkit.EventID         // table\x1fkey → last id applied
	open    map[string]*openResync               // table → the resync under way
	ended   map[int64]bool
	swept   int // rows removed at resync_end
}

type openResync struct {
	id    int64
	begin pluginkit.EventID
	seen  map[string]bool
}

func newResyncMirror(keyCols []string, sweep bool) *resyncMirror {
	return &resyncMirror{keyCols: keyCols, sweep: sweep, rows: map[string]map[string]map[string]any{},
		applied: map[string]pluginkit.EventID{}, open: map[string]*openResync{}, ended: map[int64]bool{}}
}

func (m *resyncMirror) applyAll(t testing.TB, evs []received) *resyncMirror {
	for _, r := range evs {
		m.apply(t, r)
	}
	return m
}

func (m *resyncMirror) apply(t testing.TB, r received) {
	t.Helper()
	var e struct {
		Op     string         `json:"op"`
		New    map[string]any `json:"new"`
		Old    map[string]any `json:"old"`
		Resync int64          `json:"resync"`
	}
	if err := json.Unmarshal(r.Raw, &e); err != nil {
		t.Fatalf("event %s: %v", r.ID, err)
	}
	tb := m.rows[r.Table]
	if tb == nil {
		tb = map[string]map[string]any{}
		m.rows[r.Table] = tb
	}
	switch e.Op {
	case "resync_begin":
		if m.sweep && !m.ended[e.Resync] && (m.open[r.Table] == nil || m.open[r.Table].id != e.Resync) {
			m.open[r.Table] = &openResync{id: e.Resync, begin: r.ID, seen: map[string]bool{}}
			// Positions applied before the gap say nothing of the rows
			// after it: after a failover the new primary's ids may be
			// lower than some the old one delivered.
			for k := range m.applied {
				if strings.HasPrefix(k, r.Table+"\x1f") {
					delete(m.applied, k)
				}
			}
		}
		return
	case "resync_end":
		o := m.open[r.Table]
		if o == nil || o.id != e.Resync {
			return // a redelivered end, already swept (or sweep is off)
		}
		for k := range tb {
			if !o.seen[k] {
				delete(tb, k)
				m.swept++
			}
		}
		delete(m.open, r.Table)
		m.ended[e.Resync] = true
		return
	case "truncate":
		clear(tb)
		return
	}
	var key, oldKey string
	if e.New != nil {
		key = rowKey(e.New, m.keyCols)
	}
	if e.Old != nil {
		oldKey = rowKey(e.Old, m.keyCols)
	}
	if key == "" {
		key, oldKey = oldKey, ""
	}
	if o := m.open[r.Table]; o != nil && r.ID.Compare(o.begin) > 0 {
		o.seen[key] = true
	}
	if last, ok := m.applied[r.Table+"\x1f"+key]; ok && r.ID.Compare(last) <= 0 {
		return
	}
	m.applied[r.Table+"\x1f"+key] = r.ID
	switch e.Op {
	case "insert", "update", "read":
		if oldKey != "" && oldKey != key {
			delete(tb, oldKey)
			m.applied[r.Table+"\x1f"+oldKey] = r.ID
		}
		tb[key] = e.New
	case "delete":
		delete(tb, key)
	default:
		t.Fatalf("event %s: unexpected op %q", r.ID, e.Op)
	}
}

// diff describes how the copy of table differs from the rows of table.
func (m *resyncMirror) diff(t testing.TB, db *pgx.Conn, table string) []string {
	t.Helper()
	want := tableRowsByKey(t, db, "public."+table, m.keyCols)
	got := m.rows[table]
	var diffs []string
	for k, w := range want {
		if g, ok := got[k]; !ok || !reflect.DeepEqual(g, w) {
			diffs = append(diffs, fmt.Sprintf("row %s: copy has %v, table has %v", k, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("row %s: copy has %v, the table has no such row", k, g))
		}
	}
	return diffs
}

// ---- helpers ----------------------------------------------------------------

// requestResync runs walcast resync and returns the ids it queued.
func requestResync(t *testing.T, pipeline string, args ...string) []int64 {
	t.Helper()
	out, errOut, code := walcastCmd(t, append([]string{"resync", pipeline}, args...)...)
	if code != 0 {
		t.Fatalf("walcast resync exited %d:\n%s%s", code, out, errOut)
	}
	var ids []int64
	for _, line := range strings.Split(out, "\n") {
		var id int64
		if _, err := fmt.Sscanf(line, "resync %d ", &id); err == nil {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		t.Fatalf("walcast resync printed %q", out)
	}
	return ids
}

// waitConfirmed waits until the pipeline's slot, and the catch-up slot of
// every sink detached from it, are confirmed past the WAL as it is now:
// every durable sink then holds every change committed before (a
// detached sink holds the pipeline's slot back no longer, only its own).
func waitConfirmed(t testing.TB, db *pgx.Conn, pipeline string, d time.Duration) {
	t.Helper()
	var now string
	if err := db.QueryRow(context.Background(), `SELECT pg_current_wal_insert_lsn()::text`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pipeline "+pipeline+"'s slots confirmed to "+now, d, func() bool {
		var ok *bool
		err := db.QueryRow(context.Background(), `SELECT bool_and(confirmed_flush_lsn >= $1::pg_lsn) FROM pg_replication_slots
WHERE slot_name = 'walcast_' || $2 OR slot_name IN (SELECT slot FROM walcast.catchup_slots WHERE pipeline = $2)`, now, pipeline).Scan(&ok)
		return err == nil && ok != nil && *ok
	})
}

// gapChanges deletes, updates, re-keys and inserts rows of items, as a
// gap no slot holds.
func gapChanges(t testing.TB, db *pgx.Conn, existing int) {
	t.Helper()
	exec1(t, db, `DELETE FROM items WHERE id % 10 = 1`)
	exec1(t, db, `UPDATE items SET v = v + 100 WHERE id % 10 = 2`)
	exec1(t, db, `UPDATE items SET id = id + 1000000 WHERE id % 100 = 3`)
	exec1(t, db, fmt.Sprintf(`INSERT INTO items SELECT g, 7, 'gap' FROM generate_series(%d, %d) g`, existing+1, existing+500))
}

// hasMarker reports whether evs hold resync id's marker op.
func hasMarker(evs []received, op string, id int64) bool {
	for _, e := range evs {
		if e.Op == op && strings.HasSuffix(string(e.Raw), fmt.Sprintf(`"resync":%d}`, id)) {
			return true
		}
	}
	return false
}

// startItemWriters runs inserts, updates, deletes and key changes on
// items(id, v, pad) on their own connection until the returned stop is
// called; stop returns the writers' error and how many statements ran.
func startItemWriters(t testing.TB, dsn string, next int) (stop func() (int64, error)) {
	wdb := connect(t, dsn)
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int64
	done := make(chan error, 1)
	go func() {
		r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
		for ctx.Err() == nil {
			var sql string
			switch op := r.IntN(10); {
			case op < 4:
				lo := 1 + r.IntN(next)
				sql = fmt.Sprintf(`UPDATE items SET v = v + 1 WHERE id BETWEEN %d AND %d`, lo, lo+r.IntN(5))
			case op < 6:
				sql = fmt.Sprintf(`DELETE FROM items WHERE id = %d`, 1+r.IntN(next))
			case op < 7:
				sql = fmt.Sprintf(`UPDATE items SET id = %d, pad = 'moved' WHERE id = %d`, next, 1+r.IntN(next))
				next++
			default:
				sql = fmt.Sprintf(`INSERT INTO items VALUES (%d, 0, 'new')`, next)
				next++
			}
			if _, err := wdb.Exec(context.Background(), sql); err != nil {
				done <- fmt.Errorf("%s: %w", sql, err)
				return
			}
			n.Add(1)
			// Pacing, not waiting: a few hundred changes a second.
			time.Sleep(2 * time.Millisecond)
		}
		done <- nil
	}()
	return func() (int64, error) {
		cancel()
		err := <-done
		return n.Load(), err
	}
}

// ---- tests ------------------------------------------------------------------

// TestResyncHealsLostSlot loads a table through a first resync, stops
// walcast, drops its slot and deletes, updates, inserts and re-keys rows
// in the gap; walcast goes on with --accept-gap while writers keep
// running, and a resync to one sink heals it: walcast is SIGKILLed in the
// middle of the resync (a second resync of the table is refused while it
// runs) and restarted. A consumer keeping the marker contract ends equal
// to the table, all columns, rows deleted in the gap included; the same
// consumer ignoring the markers keeps the gap's deleted rows; the other
// sink receives nothing of the per-sink resync.
func TestResyncHealsLostSlot(t *testing.T) {
	parallel(t)
	const existing = 40000
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`,
		fmt.Sprintf(`INSERT INTO items SELECT g, 0, repeat('p', 40) FROM generate_series(1, %d) g`, existing))
	rcv, other := newReceiver(t), newReceiver(t)
	rcv.delay = 5 * time.Millisecond
	pipeline := writePipeline(t, "heal", dsn, []string{"public.items"},
		sinkSpec{ID: "hook", URL: rcv.URL, Batch: 100, Extra: "    max_in_flight = 2\n"},
		sinkSpec{ID: "other", URL: other.URL})
	proc := startCapturing(t, db, pipeline)
	first := requestResync(t, pipeline)
	waitFor(t, "the first resync to finish", 2*time.Minute, func() bool { s, _, _ := backfillState(t, db, first[0]); return s == "done" })
	waitConfirmed(t, db, "heal", 2*time.Minute)
	if d := newResyncMirror([]string{"id"}, true).applyAll(t, rcv.events()).diff(t, db, "items"); len(d) > 0 {
		t.Fatalf("after the first resync the copy differs from the table in %d rows, e.g. %s", len(d), d[0])
	}
	proc.stop()

	// The gap: no slot holds these changes.
	exec1(t, db, `SELECT pg_drop_replication_slot('walcast_heal')`)
	lost := time.Now()
	gapChanges(t, db, existing)
	stopWriters := startItemWriters(t, dsn, existing+501)

	proc = startCapturing(t, db, pipeline, "--accept-gap")
	healing := time.Now()
	id := requestResync(t, pipeline, "--sink", "hook")[0]
	waitFor(t, "resync rows before the kill", 2*time.Minute, func() bool { _, rows, _ := backfillState(t, db, id); return rows >= existing/4 })
	proc.kill()
	if state, rows, _ := backfillState(t, db, id); state != "running" || rows >= existing-existing/10 {
		t.Fatalf("the kill did not land during the resync: state %s, %d rows done", state, rows)
	}
	out, errOut, code := walcastCmd(t, "resync", pipeline, "--table", "public.items", "--sink", "hook")
	if code != 1 || !strings.Contains(errOut, fmt.Sprintf("by resync %d", id)) {
		t.Fatalf("a second resync of items while resync %d runs: exit %d, want 1 naming it:\n%s%s", id, code, out, errOut)
	}
	proc = startWalcast(t, pipeline)
	waitFor(t, "the resync to finish", 3*time.Minute, func() bool { s, _, _ := backfillState(t, db, id); return s == "done" })
	writes, err := stopWriters()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("resync %d's resync_end to reach sink hook", id), time.Minute, func() bool {
		return hasMarker(rcv.events(), "resync_end", id)
	})
	waitConfirmed(t, db, "heal", 3*time.Minute)
	converged := time.Since(healing)
	status, _ := walcastOut(t, "status", pipeline)
	proc.stop()

	evs := rcv.events()
	sameContent(t, evs)
	m := newResyncMirror([]string{"id"}, true).applyAll(t, evs)
	if d := m.diff(t, db, "items"); len(d) > 0 {
		t.Fatalf("the copy kept with the marker contract differs from the table in %d rows, e.g. %s", len(d), d[0])
	}
	plain := newResyncMirror([]string{"id"}, false).applyAll(t, evs)
	stale := len(plain.diff(t, db, "items"))
	if stale == 0 || m.swept == 0 {
		t.Fatalf("the gap left nothing to sweep (%d stale rows without the markers, %d swept): the test proves nothing", stale, m.swept)
	}
	otherReads := 0
	for _, e := range other.events() {
		if strings.Contains(string(e.Raw), fmt.Sprintf(`"resync":%d}`, id)) {
			t.Fatalf("sink other received a marker of resync %d (for sink hook only): %s", id, e.Raw)
		}
		if e.Op == "read" {
			otherReads++
		}
	}
	if otherReads < existing || otherReads > existing+existing/10 {
		t.Fatalf("sink other received %d read events: want the first resync's %d (plus redeliveries), none of resync %d for sink hook", otherReads, existing, id)
	}
	wantAll(t, status, "gap accepted", "resync done")
	t.Logf("%d rows, %d writer statements, SIGKILL mid-resync; %d rows swept at resync_end, %d would be stale without the markers; from the restart with --accept-gap to every change confirmed: %s (slot lost %s before the restart)",
		existing, writes, m.swept, stale, converged.Round(100*time.Millisecond), healing.Sub(lost).Round(100*time.Millisecond))
}

// TestOnGapResyncLostSlot: with on_gap = "resync", a start after the
// slot was dropped while walcast was stopped (and rows deleted, updated,
// re-keyed and inserted meanwhile) needs no flag: walcast records the gap,
// creates the new slot and resyncs the table, and a consumer keeping the
// marker contract ends equal to the table, writers running throughout.
// walcast status says beforehand that the next run heals (exit 0, not
// 3), and afterwards shows the gap and the resync.
func TestOnGapResyncLostSlot(t *testing.T) {
	parallel(t)
	const existing = 20000
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`,
		fmt.Sprintf(`INSERT INTO items SELECT g, 0, repeat('p', 40) FROM generate_series(1, %d) g`, existing))
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "autoheal", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL, Batch: 100})
	setSourceAttr(t, pipeline, `on_gap = "resync"`)
	proc := startCapturing(t, db, pipeline)
	first := requestResync(t, pipeline)[0]
	waitFor(t, "the first resync to finish", 2*time.Minute, func() bool { s, _, _ := backfillState(t, db, first); return s == "done" })
	waitConfirmed(t, db, "autoheal", 2*time.Minute)
	proc.stop()

	exec1(t, db, `SELECT pg_drop_replication_slot('walcast_autoheal')`)
	lost := time.Now()
	gapChanges(t, db, existing)
	out, code := walcastOut(t, "status", pipeline)
	if code != 0 || !strings.Contains(out, `with on_gap = "resync" the next walcast run records the gap`) {
		t.Fatalf("walcast status with the slot lost and on_gap = \"resync\": exit %d, want 0 saying the next run heals:\n%s", code, out)
	}
	stopWriters := startItemWriters(t, dsn, existing+501)
	proc = startCapturing(t, db, pipeline)
	healing := time.Now()
	var id int64
	waitFor(t, "a resync queued by the start", time.Minute, func() bool {
		return db.QueryRow(context.Background(), `SELECT id FROM walcast.backfills WHERE pipeline = 'autoheal' AND resync AND id > $1`, first).Scan(&id) == nil
	})
	waitFor(t, "the resync to finish", 3*time.Minute, func() bool { s, _, _ := backfillState(t, db, id); return s == "done" })
	writes, err := stopWriters()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("resync %d's resync_end to reach sink hook", id), time.Minute, func() bool {
		return hasMarker(rcv.events(), "resync_end", id)
	})
	waitConfirmed(t, db, "autoheal", 3*time.Minute)
	converged := time.Since(healing)
	status, _ := walcastOut(t, "status", pipeline)
	proc.stop()
	wantAll(t, status, "gap accepted", "(slot lost): sink hook missed the changes", "resync done")
	wantAll(t, proc.logText(), "accepted a gap", "on_gap = resync: resyncing a table after the gap")

	evs := rcv.events()
	sameContent(t, evs)
	m := newResyncMirror([]string{"id"}, true).applyAll(t, evs)
	if d := m.diff(t, db, "items"); len(d) > 0 {
		t.Fatalf("the copy kept with the marker contract differs from the table in %d rows, e.g. %s", len(d), d[0])
	}
	if m.swept == 0 {
		t.Fatal("nothing was swept at resync_end: the gap's deletes did not reach the copy some other way, so the test proves nothing")
	}
	t.Logf("%d rows, %d writer statements; %d rows swept at resync_end; from the start after the loss to every change confirmed: %s (slot dropped %s before the start)",
		existing, writes, m.swept, converged.Round(100*time.Millisecond), healing.Sub(lost).Round(100*time.Millisecond))
}

// setSourceAttr adds a line to the source block of a pipeline file that
// writePipeline wrote.
func setSourceAttr(t testing.TB, path, line string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "source \"postgres\" {\n", "source \"postgres\" {\n  "+line+"\n", 1)
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPostgresSinkResyncSweeps: the postgres sink in mirror mode keeps
// the marker contract itself. Its target table is loaded by a first
// resync, then emptied behind walcast's back and given rows the source
// never had (an old backup restored over it, say); `walcast resync --sink
// mirror --wait` while writers run makes it equal to the source in every
// column again: the read rows are written, and the rows not seen since
// resync_begin deleted at resync_end. The pending keys and the record of
// the open resync are gone afterwards, and the other sink got no marker.
func TestPostgresSinkResyncSweeps(t *testing.T) {
	parallel(t)
	const existing = 5000
	dsn, db := newSource(t, pgItems, fmt.Sprintf(`INSERT INTO items (id, v, pad, amount, at, tags, doc, blob, flag, f)
SELECT g, 0, repeat('x', 40), g * 1.25, now(), ARRAY['t', g::text], jsonb_build_object('id', g), decode(md5(g::text), 'hex'), g %% 2 = 0, g / 3.0
FROM generate_series(1, %d) g`, existing))
	tg := newTarget(t)
	tg.copySchema(t, dsn, "public.items")
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "pgsweep", dsn, []string{"public.items"},
		sinkSpec{ID: "mirror", SinkType: "postgres", Batch: 100, Config: fmt.Sprintf("    dsn = %q\n    create_tables = false\n", tg.dsn)},
		sinkSpec{ID: "hook", URL: rcv.URL})
	proc := startCapturing(t, db, pipeline)
	first := requestResync(t, pipeline, "--sink", "mirror")[0]
	waitFor(t, "the first resync to finish", 2*time.Minute, func() bool { s, _, _ := backfillState(t, db, first); return s == "done" })
	waitConfirmed(t, db, "pgsweep", 2*time.Minute)
	checkSameRows(t, dsn, tg, "public.items")

	exec1(t, tg.db, `TRUNCATE items`)
	exec1(t, tg.db, `INSERT INTO items (id, v, pad) SELECT g, -1, 'stale' FROM generate_series(1, 500) g`)
	exec1(t, tg.db, `INSERT INTO items (id, v, pad) SELECT g, -1, 'never in the source' FROM generate_series(8000001, 8000300) g`)
	stopWriters := startItemWriters(t, dsn, existing+1)
	out, errOut, code := walcastCmd(t, "resync", pipeline, "--sink", "mirror", "--wait")
	if code != 0 {
		t.Fatalf("walcast resync --sink mirror --wait: exit %d\n%s%s", code, out, errOut)
	}
	writes, err := stopWriters()
	if err != nil {
		t.Fatal(err)
	}
	waitConfirmed(t, db, "pgsweep", 2*time.Minute)
	log := proc.logText()
	proc.stop()
	checkSameRows(t, dsn, tg, "public.items")
	if n := queryInt(t, tg.db, `SELECT count(*) FROM walcast_checkpoints_resyncs`); n != 0 {
		t.Errorf("%d resyncs still recorded open in the target after resync_end", n)
	}
	if n := queryInt(t, tg.db, `SELECT count(*) FROM pg_tables WHERE tablename LIKE 'walcast_checkpoints_r%' AND tablename <> 'walcast_checkpoints_resyncs'`); n != 0 {
		t.Errorf("%d pending key tables left in the target after resync_end", n)
	}
	if rcv.countOp("resync_begin")+rcv.countOp("resync_end") != 0 {
		t.Errorf("sink hook received markers of resyncs for sink mirror only")
	}
	if !strings.Contains(log, "resync end: deleted the rows the source no longer has") {
		t.Errorf("the sink did not log its sweep:\n%s", tail(log, 20))
	}
	t.Logf("%d rows, %d writer statements during the resync; %s", existing, writes, strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]))
}

// TestKafkaResyncMarkers: the kafka sink writes a resync's markers as
// records keyed {"walcast_id":"<event id>"} with the walcast-op header
// resync_begin or resync_end, spread over the topic's three partitions
// with the rows. A consumer that reads every partition, orders by
// walcast-id and keeps the marker contract heals a gap (a slot dropped
// while walcast was stopped, a quarter of the rows deleted in it); without
// the markers it keeps the deleted rows.
func TestKafkaResyncMarkers(t *testing.T) {
	parallel(t)
	addr := startKafka(t)
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	pipeline := writePipeline(t, "kresync", dsn, []string{"public.items"},
		sinkSpec{ID: "k", SinkType: "kafka", Config: kafkaConfig(addr, true, "walcast-kresync")})
	proc := startCapturing(t, db, pipeline)
	exec1(t, db, `INSERT INTO items SELECT g, 0, 'p' FROM generate_series(1, 200) g`)
	waitConfirmed(t, db, "kresync", time.Minute)
	proc.stop()
	exec1(t, db, `SELECT pg_drop_replication_slot('walcast_kresync')`)
	exec1(t, db, `DELETE FROM items WHERE id % 4 = 0`)
	exec1(t, db, `UPDATE items SET v = 5 WHERE id % 4 = 1`)
	proc = startCapturing(t, db, pipeline, "--accept-gap")
	out, errOut, code := walcastCmd(t, "resync", pipeline, "--wait")
	if code != 0 {
		t.Fatalf("walcast resync --wait: exit %d\n%s%s", code, out, errOut)
	}
	proc.stop()
	recs := readKafka(t, addr, "walcast.public.items", kgo.ReadCommitted())
	partitions := map[int32]bool{}
	markers := 0
	for _, r := range recs {
		partitions[r.Partition] = true
		if op := r.Headers["walcast-op"]; op == "resync_begin" || op == "resync_end" {
			markers++
			if want := fmt.Sprintf(`{"walcast_id":%q}`, r.Headers["walcast-id"]); string(r.Key) != want {
				t.Errorf("%s record keyed %s, want %s", op, r.Key, want)
			}
		}
	}
	if markers != 2 || len(partitions) < 2 {
		t.Fatalf("%d marker records over %d partitions, want 2 markers and the records spread over the partitions", markers, len(partitions))
	}
	evs := asReceived(t, recs)
	slices.SortFunc(evs, func(a, b received) int { return a.ID.Compare(b.ID) })
	m := newResyncMirror([]string{"id"}, true).applyAll(t, evs)
	if d := m.diff(t, db, "items"); len(d) > 0 {
		t.Fatalf("the copy kept with the marker contract, in walcast-id order, differs from the table in %d rows, e.g. %s", len(d), d[0])
	}
	if stale := len(newResyncMirror([]string{"id"}, false).applyAll(t, evs).diff(t, db, "items")); stale != 50 || m.swept != 50 {
		t.Fatalf("without the markers %d rows differ, %d swept with them; want the 50 deleted in the gap", stale, m.swept)
	}
}

// startFailoverWriters is startItemWriters through a DSN that follows the
// primary: a statement that fails (the primary went away) is retried on
// a new connection until it succeeds, so the writers go on against the
// promoted standby.
func startFailoverWriters(t testing.TB, dsn string, next int) (stop func() (int64, error)) {
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int64
	done := make(chan error, 1)
	go func() {
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				conn.Close(context.Background())
			}
		}()
		r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
		for ctx.Err() == nil {
			var sql string
			switch op := r.IntN(10); {
			case op < 4:
				lo := 1 + r.IntN(next)
				sql = fmt.Sprintf(`UPDATE items SET v = v + 1 WHERE id BETWEEN %d AND %d`, lo, lo+r.IntN(5))
			case op < 6:
				sql = fmt.Sprintf(`DELETE FROM items WHERE id = %d`, 1+r.IntN(next))
			case op < 7:
				sql = fmt.Sprintf(`UPDATE items SET id = %d, pad = 'moved' WHERE id = %d`, next, 1+r.IntN(next))
				next++
			default:
				sql = fmt.Sprintf(`INSERT INTO items VALUES (%d, 0, 'new')`, next)
				next++
			}
			for ctx.Err() == nil {
				if conn == nil {
					c, err := pgx.Connect(ctx, dsn)
					if err != nil {
						time.Sleep(50 * time.Millisecond) // pacing the reconnects while no primary answers
						continue
					}
					conn = c
				}
				if _, err := conn.Exec(ctx, sql); err != nil {
					conn.Close(context.Background())
					conn = nil
					continue
				}
				n.Add(1)
				break
			}
			time.Sleep(2 * time.Millisecond) // pacing
		}
		done <- nil
	}()
	return func() (int64, error) {
		cancel()
		err := <-done
		return n.Load(), err
	}
}

// TestOnGapResyncFailover is a PostgreSQL 15/16 primary failover: a
// primary and a streaming standby (pg_basebackup -R) started by the test,
// walcast with a two-host DSN (target_session_attrs=read-write) and
// on_gap = "resync", writers running throughout; the primary is stopped
// with -m immediate and the standby promoted (its copy has no logical
// slot). The same walcast process, nobody touching it, loses its
// leadership session, takes it again on the promoted standby through the
// DSN, finds the slot lost there, records the gap, creates the slot and
// resyncs. A consumer
// keeping the marker contract ends with exactly the new primary's rows,
// all columns, rows deleted during the failover included.
func TestOnGapResyncFailover(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	rows := 20000
	if v, err := strconv.Atoi(os.Getenv("WALCAST_FAILOVER_ROWS")); err == nil && v > 0 {
		rows = v
	}
	start := time.Now()
	fo := newFailoverPair(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`,
		fmt.Sprintf(`INSERT INTO items SELECT g, 0, repeat('p', 40) FROM generate_series(1, %d) g`, rows))
	primary, standby, pdb, dsn := fo.primary, fo.standby, fo.pdb, fo.dsn

	t.Logf("clusters ready after %s", time.Since(start).Round(100*time.Millisecond))
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "failover", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL, Batch: 500})
	setSourceAttr(t, pipeline, `on_gap = "resync"`)
	proc := startCapturing(t, pdb, pipeline)
	first := requestResync(t, pipeline)[0]
	waitFor(t, "the first resync to finish", 3*time.Minute, func() bool { s, _, _ := backfillState(t, pdb, first); return s == "done" })
	waitConfirmed(t, pdb, "failover", 3*time.Minute)
	stopWriters := startFailoverWriters(t, dsn, rows+1)
	waitFor(t, "live changes to reach the sink", time.Minute, func() bool { return rcv.countOp("insert") > 20 })

	t.Logf("loaded after %s", time.Since(start).Round(100*time.Millisecond))
	if err := primary.Stop(ctx, "immediate"); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	sdb := connect(t, standby.DSN(fo.dbname))
	var id int64
	waitFor(t, "a resync queued on the new primary", 2*time.Minute, func() bool {
		return sdb.QueryRow(ctx, `SELECT id FROM walcast.backfills WHERE pipeline = 'failover' AND resync AND id <> $1 ORDER BY id DESC LIMIT 1`, first).Scan(&id) == nil
	})
	waitFor(t, "the resync to finish", 5*time.Minute, func() bool { s, _, _ := backfillState(t, sdb, id); return s == "done" })
	writes, err := stopWriters()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("resync %d's resync_end to reach sink hook", id), time.Minute, func() bool {
		return hasMarker(rcv.events(), "resync_end", id)
	})
	waitConfirmed(t, sdb, "failover", 3*time.Minute)
	converged := time.Since(promoted)
	status, _ := walcastOut(t, "status", pipeline)
	proc.stop()
	wantAll(t, status, "gap accepted", "(slot lost): sink hook missed the changes", "resync done")
	wantAll(t, proc.logText(), "on_gap = resync: resyncing a table after the gap")

	evs := rcv.events()
	m := newResyncMirror([]string{"id"}, true).applyAll(t, evs)
	if d := m.diff(t, sdb, "items"); len(d) > 0 {
		t.Fatalf("the copy kept with the marker contract differs from the new primary in %d rows, e.g. %s", len(d), d[0])
	}
	t.Logf("%d rows, %d writer statements; %d rows swept at resync_end; from promotion to every change on the new primary confirmed: %s",
		rows, writes, m.swept, converged.Round(100*time.Millisecond))
}

// failoverPair is a primary started for one test, a streaming standby of
// it (pg_basebackup -R), and the libpq multi-host DSN that follows
// whichever of the two accepts writes.
type failoverPair struct {
	primary, standby *pgtest.Cluster
	pdsn, dsn        string
	dbname           string
	pdb              *pgx.Conn // on the primary
}

// newFailoverPair starts the pair, running setup on the primary before the
// standby is copied from it.
func newFailoverPair(t *testing.T, setup ...string) failoverPair {
	t.Helper()
	primary := pgtest.New(t, pgtest.Options{})
	pdsn := primary.Database(t)
	pdb := connect(t, pdsn)
	for _, sql := range setup {
		exec1(t, pdb, sql)
	}
	standby, err := primary.Standby(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { standby.Close() })
	u, err := url.Parse(pdsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = fmt.Sprintf("%s:%d,%s:%d", primary.Host, primary.Port, standby.Host, standby.Port)
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	u.RawQuery = q.Encode()
	return failoverPair{primary: primary, standby: standby, pdsn: pdsn, dsn: u.String(), dbname: u.Path[1:], pdb: pdb}
}
