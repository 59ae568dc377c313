package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walcast/walcast/host/pgtest"
)

// partitionedItems is a table partitioned by key range into four
// partitions (ids p*100000+1 … p*100000+n are loaded later by
// loadPartitions), and a standalone table holding n rows of the range a
// fifth partition would cover.
func partitionedItems(n int) []string {
	setup := []string{`CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text) PARTITION BY RANGE (id)`}
	for p := 0; p < 4; p++ {
		setup = append(setup, fmt.Sprintf(`CREATE TABLE items_p%d PARTITION OF items FOR VALUES FROM (%d) TO (%d)`, p, p*100000, (p+1)*100000))
	}
	return append(setup, `CREATE TABLE items_p4 (id int PRIMARY KEY, v int NOT NULL, pad text)`,
		fmt.Sprintf(`INSERT INTO items_p4 SELECT g, 7, 'attached' FROM generate_series(400001, %d) g`, 400000+n))
}

// startPartitionWriters writes to items until stopped: inserts, updates,
// deletes and key changes in partition p0, and updates and deletes of
// rows anywhere in the five ranges, so that some race the partition
// commands of the test.
func startPartitionWriters(t testing.TB, dsn string, n int, next *int) (count func() int64, stop func() int64) {
	wdb := connect(t, dsn)
	ctx, cancel := context.WithCancel(context.Background())
	var writes atomic.Int64
	done := make(chan error, 1)
	go func() {
		r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
		for ctx.Err() == nil {
			anywhere := r.IntN(5)*100000 + 1 + r.IntN(n)
			var sql string
			switch op := r.IntN(10); {
			case op < 3:
				sql = fmt.Sprintf(`UPDATE items SET v = v + 1 WHERE id = %d`, anywhere)
			case op < 4:
				sql = fmt.Sprintf(`DELETE FROM items WHERE id = %d`, anywhere)
			case op < 5:
				sql = fmt.Sprintf(`DELETE FROM items WHERE id = %d`, 1+r.IntN(*next))
			case op < 6:
				sql = fmt.Sprintf(`UPDATE items SET id = %d, pad = 'moved' WHERE id = %d`, *next, 1+r.IntN(*next))
				*next++
			default:
				sql = fmt.Sprintf(`INSERT INTO items VALUES (%d, 0, 'new')`, *next)
				*next++
			}
			if _, err := wdb.Exec(context.Background(), sql); err != nil {
				done <- fmt.Errorf("%s: %w", sql, err)
				return
			}
			writes.Add(1)
			time.Sleep(2 * time.Millisecond) // pacing: a few hundred changes a second
		}
		done <- nil
	}()
	return writes.Load, func() int64 {
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return writes.Load()
	}
}

// opCounts counts the events of evs by op, as "op×n" in op order.
func opCounts(evs []received) string {
	counts := map[string]int{}
	for _, e := range evs {
		counts[e.Op]++
	}
	var ops []string
	for op, n := range counts {
		ops = append(ops, fmt.Sprintf("%s×%d", op, n))
	}
	sort.Strings(ops)
	return strings.Join(ops, " ")
}

// TestPartitionsMirror: a copy of a partitioned table built from the
// stream by a consumer keeping the marker contract equals the table after
// each of these commands, each run while writers change rows of every
// partition (the ones the command touches included), and each giving the
// events walcast documents for it (docs/events.md, Partitions):
//
//   - ATTACH of a partition holding rows: read events of its rows (a
//     backfill of the partition);
//   - DETACH of one (ddl_events = true): a delete per row at the DETACH's
//     position, no resync; walcast is SIGKILLed once the command is in
//     and restarted;
//   - DROP of one: a resync of the table (its resync_end removes the
//     dropped rows from the copy);
//   - TRUNCATE of one: a delete per row at the TRUNCATE's position (the
//     trigger walcast put on the partition), no resync.
//
// Without the partition watch and triggers the attached rows never reach
// the copy and the detached, dropped and truncated ones stay in it.
func TestPartitionsMirror(t *testing.T) {
	parallel(t)
	n := 2000 * pgtest.Chaos(t, 1)
	dsn, db := newSource(t, partitionedItems(n)...)
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "parts", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL, Batch: 200})
	setSourceAttr(t, pipeline, `ddl_events = true`)
	watch := "--slot-check-interval=200ms"
	proc := startCapturing(t, db, pipeline, watch)
	waitFor(t, "the first check of the partitions and walcast's triggers on them", time.Minute, func() bool {
		var triggers int
		db.QueryRow(context.Background(), `SELECT count(*) FROM pg_trigger WHERE tgname = 'walcast_partition_truncate_before'`).Scan(&triggers)
		return triggers == 5 // the table and its four partitions
	})
	for p := 0; p < 4; p++ {
		exec1(t, db, fmt.Sprintf(`INSERT INTO items SELECT g, 0, 'old' FROM generate_series(%d, %d) g`, p*100000+1, p*100000+n))
	}
	next := n + 1
	// The copy, kept by the marker contract, fed the events as they
	// arrive.
	copied, applied, seen := newResyncMirror([]string{"id"}, true), 0, 0
	// step runs command while writers run (some writes before it, some
	// after), waits until the copy equals the table, and returns the
	// events delivered since the step began.
	step := func(what, command string, during func()) []received {
		t.Helper()
		count, stop := startPartitionWriters(t, dsn, n, &next)
		waitFor(t, "writes before "+what, time.Minute, func() bool { return count() >= 30 })
		began := time.Now()
		exec1(t, db, command)
		at := count()
		if during != nil {
			during()
		}
		waitFor(t, "writes after "+what, time.Minute, func() bool { return count() >= at+30 })
		writes := stop()
		var evs []received
		waitFor(t, "the copy to equal the table after "+what, 2*time.Minute, func() bool {
			evs = rcv.events()
			copied.applyAll(t, evs[applied:])
			applied = len(evs)
			return len(copied.diff(t, db, "items")) == 0
		})
		since := evs[seen:]
		seen = len(evs)
		t.Logf("%s (%d writes): the copy equals the table %s after the command; events since the step began: %s",
			what, writes, time.Since(began).Round(10*time.Millisecond), opCounts(since))
		return since
	}
	ops := func(evs []received, op string) int {
		k := 0
		for _, e := range evs {
			if e.Op == op {
				k++
			}
		}
		return k
	}
	step("loading the four partitions", `SELECT 1`, nil)

	evs := step(fmt.Sprintf("ATTACH of a partition holding %d rows", n), `ALTER TABLE items ATTACH PARTITION items_p4 FOR VALUES FROM (400000) TO (500000)`, nil)
	if reads := ops(evs, "read"); reads < n-200 || ops(evs, "resync_begin") > 0 {
		t.Fatalf("ATTACH: %d read events and %d resyncs, want about %d reads (the partition's rows) and no resync", reads, ops(evs, "resync_begin"), n)
	}
	evs = step("DETACH of a partition, SIGKILL, restart", `ALTER TABLE items DETACH PARTITION items_p1`, func() {
		proc.kill()
		proc = startWalcast(t, pipeline, watch)
	})
	if dels := ops(evs, "delete"); dels < n-200 || ops(evs, "resync_begin") > 0 {
		t.Fatalf("DETACH: %d delete events and %d resyncs, want about %d deletes (the partition's rows) and no resync", dels, ops(evs, "resync_begin"), n)
	}
	evs = step("DROP of a partition", `DROP TABLE items_p2`, nil)
	if ops(evs, "resync_end") == 0 {
		t.Fatalf("DROP: no resync of the table")
	}
	evs = step("TRUNCATE of a partition", `TRUNCATE items_p3`, nil)
	if dels := ops(evs, "delete"); dels < n-200 || ops(evs, "resync_begin") > 0 {
		t.Fatalf("TRUNCATE: %d delete events and %d resyncs, want about %d deletes (the partition's rows) and no resync", dels, ops(evs, "resync_begin"), n)
	}
	proc.stop()
	sameContent(t, rcv.events())
	var left int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM items_p1`).Scan(&left); err != nil || left < n-200 {
		t.Fatalf("the detached partition has %d rows (%v): the test proves nothing", left, err)
	}
}

// TestPartitionDetachEvent: with ddl_events = true and on_detach =
// "event", a DETACH of a partition of a captured table, made while writers
// change rows of every partition, reaches the sink as ONE detach event of
// the table, of the DETACH's own transaction (its xid), naming the
// partition and counting the rows it took along, delivered after every
// change of the table committed before it and before every change
// committed after it, with no delete of the partition's rows and no
// resync (a later check of the watch loop finds nothing to heal).
func TestPartitionDetachEvent(t *testing.T) {
	parallel(t)
	const n = 300
	dsn, db := newSource(t, partitionedItems(n)...)
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "detach_event", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL, Batch: 50})
	setSourceAttr(t, pipeline, `ddl_events = true`)
	setSourceAttr(t, pipeline, `on_detach = "event"`)
	watch := "--slot-check-interval=200ms"
	proc := startCapturing(t, db, pipeline, watch)
	defer proc.stop()
	ctx := context.Background()
	waitFor(t, "the first check of the partitions (recorded, triggers on them)", time.Minute, func() bool {
		var recorded, triggers int
		db.QueryRow(ctx, `SELECT (SELECT count(*) FROM walcast.partitions), (SELECT count(*) FROM pg_trigger WHERE tgname = 'walcast_partition_truncate_before')`).Scan(&recorded, &triggers)
		return recorded == 5 && triggers == 5 // the table and its four partitions
	})
	for p := 0; p < 4; p++ {
		exec1(t, db, fmt.Sprintf(`INSERT INTO items SELECT g, 0, 'old' FROM generate_series(%d, %d) g`, p*100000+1, p*100000+n))
	}
	next := n + 1
	count, stop := startPartitionWriters(t, dsn, n, &next)
	waitFor(t, "writes before the DETACH", time.Minute, func() bool { return count() >= 30 })
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var xid uint32
	if err := tx.QueryRow(ctx, `SELECT (txid_current() % 4294967296)::bigint`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `ALTER TABLE items DETACH PARTITION items_p1`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	at := count()
	waitFor(t, "writes after the DETACH", time.Minute, func() bool { return count() >= at+30 })
	stop()
	var held int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM items_p1`).Scan(&held); err != nil || held < n-100 {
		t.Fatalf("the detached partition holds %d rows (%v): the test proves nothing", held, err)
	}
	// A partition created after the DETACH, and a row in it: once that
	// row has arrived, the watch loop has checked the tree after the
	// DETACH (it records the new partition), so a resync it would start
	// has had its chance.
	exec1(t, db, `CREATE TABLE items_p9 PARTITION OF items FOR VALUES FROM (900000) TO (1000000)`)
	waitFor(t, "the watch loop to record the partition made after the DETACH", time.Minute, func() bool {
		var seen bool
		db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM walcast.partitions WHERE partition = 'public.items_p9')`).Scan(&seen)
		return seen
	})
	exec1(t, db, `INSERT INTO items VALUES (900001, 9, 'last')`)
	var evs []received
	waitFor(t, "the row written after the watch's check", time.Minute, func() bool {
		evs = rcv.events()
		for _, e := range evs {
			if e.Key == `{"id":900001}` {
				return true
			}
		}
		return false
	})
	sameContent(t, evs)

	var detach []int
	for i, e := range evs {
		if e.Op == "detach" {
			detach = append(detach, i)
		}
	}
	if len(detach) != 1 {
		t.Fatalf("%d detach events, want exactly one; events: %s", len(detach), opCounts(evs))
	}
	d := evs[detach[0]]
	var env struct {
		Schema, Table, Partition string
		Key, New, Old            json.RawMessage
		Rows                     int
	}
	if err := json.Unmarshal(d.Raw, &env); err != nil {
		t.Fatal(err)
	}
	if d.Xid != xid || env.Schema != "public" || env.Table != "items" || env.Partition != "public.items_p1" || env.Rows != held ||
		string(env.Key) != "null" || string(env.New) != "null" || string(env.Old) != "null" {
		t.Fatalf("detach event %s (xid %d): want one of the DETACH's transaction (xid %d) on public.items naming public.items_p1 with %d rows and no key or row",
			d.Raw, d.Xid, xid, held)
	}
	before, after := 0, 0
	for i, e := range evs {
		switch c := e.ID.Compare(d.ID); {
		case c < 0 && i > detach[0]:
			t.Errorf("event %s (%s) committed before the DETACH (%s) arrived after its detach event", e.ID, e.Op, d.ID)
		case c > 0 && i < detach[0]:
			t.Errorf("event %s (%s) committed after the DETACH (%s) arrived before its detach event", e.ID, e.Op, d.ID)
		case c < 0:
			before++
		case c > 0:
			after++
		}
		if e.ID.CommitLSN == d.ID.CommitLSN && e.Op == "delete" {
			t.Errorf("a delete %s in the DETACH's transaction: on_detach = \"event\" gives the detach event instead", e.Key)
		}
		if e.Op == "resync_begin" {
			t.Errorf("a resync (%s) of the table: the DETACH was given its event at its position, nothing is left to heal", e.ID)
		}
	}
	if before < 4*n || after < 5 { // writes after it: updates and deletes of rows that are gone give no event
		t.Fatalf("%d events before the detach and %d after: the test proves nothing", before, after)
	}
	t.Logf("detach event %s: %s; %d events before it, %d after (%s)", d.ID, d.Raw, before, after, opCounts(evs))
}

// TestPartitionAttachBeforeFirstCheck: a partition holding rows ATTACHed
// after the pipeline's slot is created and before the partition watch's
// first check (the window held open by holding the partition lock the
// check takes, so the first checks give way) is backfilled: its rows
// arrive as read events. Before the baseline was recorded ahead of the
// slot, the first check took the attached partition for part of the
// baseline, and its rows, which no change in the stream carries, never
// arrived.
func TestPartitionAttachBeforeFirstCheck(t *testing.T) {
	parallel(t)
	const n = 500
	dsn, db := newSource(t, partitionedItems(n)...)
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "attachwin", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL, Batch: 200})
	holder := connect(t, dsn)
	exec1(t, holder, `SELECT pg_advisory_lock(hashtext('walcast.partitions:' || $1))`, "attachwin")
	proc := startCapturing(t, db, pipeline, "--slot-check-interval=200ms")
	// The slot exists; the watch's checks wait for the lock and give way.
	exec1(t, db, `ALTER TABLE items ATTACH PARTITION items_p4 FOR VALUES FROM (400000) TO (500000)`)
	exec1(t, holder, `SELECT pg_advisory_unlock(hashtext('walcast.partitions:' || $1))`, "attachwin")
	waitFor(t, "a check of the partitions that sees items_p4", time.Minute, func() bool {
		var k int
		db.QueryRow(context.Background(), `SELECT count(*) FROM walcast.partitions WHERE pipeline = 'attachwin' AND partition = 'public.items_p4'`).Scan(&k)
		return k == 1
	})
	if k := queryInt(t, db, `SELECT count(*) FROM walcast.backfills WHERE pipeline = 'attachwin' AND partition_oid = 'items_p4'::regclass::oid::bigint`); k != 1 {
		t.Fatalf("the check that first saw items_p4 (attached after the slot's start) queued %d backfills of it, want 1: its %d rows never arrive", k, n)
	}
	waitFor(t, "the attached partition's rows as read events", time.Minute, func() bool { return rcv.countOp("read") >= n })
	proc.stop()
	keys := map[string]bool{}
	for _, e := range rcv.events() {
		if e.Op == "read" {
			keys[e.Key] = true
		}
	}
	if len(keys) != n {
		t.Fatalf("%d distinct rows read, want the %d rows of items_p4", len(keys), n)
	}
}

// TestPartitionDetachKeyless: a DETACH (with ddl_events = true and the
// default on_detach = "delete") of a partition of a table without a
// primary key takes the partition's rows out of the table without
// PostgreSQL publishing a delete. For a table with REPLICA IDENTITY
// FULL, whose live deletes are keyed on every column, each detached row
// arrives as a delete with the same key and old row a live DELETE of it
// gives (a NULL included); for a table with no replica identity at all
// (allow_keyless: its deletes are never captured), walcast says at run
// time that the rows stay in the destinations, naming the table. Before,
// both partitions went off walcast's record with nothing written and
// nothing said.
func TestPartitionDetachKeyless(t *testing.T) {
	parallel(t)
	const n = 50
	dsn, db := newSource(t,
		`CREATE TABLE logs (at int NOT NULL, v text) PARTITION BY RANGE (at)`,
		`CREATE TABLE logs_p0 PARTITION OF logs FOR VALUES FROM (0) TO (1000)`,
		`CREATE TABLE logs_p1 PARTITION OF logs FOR VALUES FROM (1000) TO (2000)`,
		`ALTER TABLE logs REPLICA IDENTITY FULL`, `ALTER TABLE logs_p0 REPLICA IDENTITY FULL`, `ALTER TABLE logs_p1 REPLICA IDENTITY FULL`,
		`CREATE TABLE tags (at int NOT NULL, v text) PARTITION BY RANGE (at)`,
		`CREATE TABLE tags_p0 PARTITION OF tags FOR VALUES FROM (0) TO (1000)`,
		`CREATE TABLE tags_p1 PARTITION OF tags FOR VALUES FROM (1000) TO (2000)`,
		`ALTER TABLE tags REPLICA IDENTITY NOTHING`, `ALTER TABLE tags_p0 REPLICA IDENTITY NOTHING`, `ALTER TABLE tags_p1 REPLICA IDENTITY NOTHING`,
		fmt.Sprintf(`INSERT INTO logs SELECT g, CASE WHEN g = 1000 THEN NULL ELSE 'r' || g END FROM generate_series(1000, %d) g`, 999+n),
		fmt.Sprintf(`INSERT INTO tags SELECT g, 't' FROM generate_series(1000, %d) g`, 999+n))
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "keylessdetach", dsn, []string{"public.logs", "public.tags"}, sinkSpec{ID: "hook", URL: rcv.URL, Batch: 200})
	setSourceAttr(t, pipeline, `ddl_events = true`)
	setSourceAttr(t, pipeline, `allow_keyless = true`)
	proc := startCapturing(t, db, pipeline, "--slot-check-interval=200ms")
	waitFor(t, "the first check of the partitions", time.Minute, func() bool {
		var k int
		db.QueryRow(context.Background(), `SELECT count(*) FROM walcast.partitions WHERE pipeline = 'keylessdetach'`).Scan(&k)
		return k == 6 // two tables, two partitions each
	})
	// A live delete of a row like the detached ones, for the shape.
	exec1(t, db, `INSERT INTO logs VALUES (1, NULL)`)
	exec1(t, db, `DELETE FROM logs WHERE at = 1`)
	exec1(t, db, `ALTER TABLE logs DETACH PARTITION logs_p1`)
	deletes := func() []received {
		var out []received
		for _, e := range rcv.events() {
			if e.Op == "delete" && e.Table == "logs" {
				out = append(out, e)
			}
		}
		return out
	}
	waitFor(t, "a delete of each detached row of logs", time.Minute, func() bool { return len(deletes()) >= 1+n })
	type shape struct {
		Key json.RawMessage `json:"key"`
		Old json.RawMessage `json:"old"`
	}
	want := map[string]bool{`{"at":1,"v":null}`: true} // the live delete: every column, whole
	for g := 1000; g < 1000+n; g++ {
		v := fmt.Sprintf(`"r%d"`, g)
		if g == 1000 {
			v = "null"
		}
		want[fmt.Sprintf(`{"at":%d,"v":%s}`, g, v)] = true
	}
	for _, e := range deletes() {
		var s shape
		if err := json.Unmarshal(e.Raw, &s); err != nil {
			t.Fatal(err)
		}
		if !want[string(s.Key)] || string(s.Old) != string(s.Key) {
			t.Fatalf("delete with key %s and old %s, want the live one or one of the detached rows, whole, as the live one", s.Key, s.Old)
		}
		delete(want, string(s.Key))
	}
	if len(want) > 0 {
		t.Fatalf("%d rows of logs without their delete: %v", len(want), want)
	}

	exec1(t, db, `ALTER TABLE tags DETACH PARTITION tags_p1`)
	proc.waitLog(t, "rows left a table without a key")
	wantAll(t, proc.logText(), "public.tags", "detached or dropped public.tags_p1", "its destinations keep them")
	// The check that said so ends (records the tree) before the stop.
	waitFor(t, "the check to record tags without tags_p1", time.Minute, func() bool {
		return queryInt(t, db, `SELECT count(*) FROM walcast.partitions WHERE pipeline = 'keylessdetach' AND partition = 'public.tags_p1'`) == 0
	})
	proc.stop()
}
