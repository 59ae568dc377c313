package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/source/decode"
	"github.com/walcast/walcast/pluginkit"
)

// ---- backfill helpers ----------------------------------------------------

// sameContent fails when an id arrived twice with different bytes and
// returns how many ids arrived more than once.
func sameContent(t testing.TB, evs []received) int {
	t.Helper()
	first := map[pluginkit.EventID][]byte{}
	dups := 0
	for _, r := range evs {
		if f, ok := first[r.ID]; ok {
			dups++
			if string(f) != string(r.Raw) {
				t.Fatalf("event %s arrived twice with different content:\n%s\n%s", r.ID, f, r.Raw)
			}
			continue
		}
		first[r.ID] = r.Raw
	}
	return dups
}

// chunkMessage is a backfill chunk as test_decoding shows it.
type chunkMessage struct {
	Backfill int64
	Chunk    int64
	Sinks    []string
	Rows     [][]*string
}

// committed reads a test_decoding slot: the committed changes of table
// and every backfill chunk written into the WAL (committed chunks only:
// a chunk whose transaction was cut short by a kill never decodes).
func committed(t testing.TB, db *pgx.Conn, slot, table string) (changes int, chunks []chunkMessage) {
	t.Helper()
	// Binary: a chunk's rows are length-prefixed values, not text.
	rows, err := db.Query(context.Background(), `SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, 'skip-empty-xacts', '1')`, slot)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			t.Fatal(err)
		}
		line := string(data)
		switch {
		case strings.HasPrefix(line, "table "+table+": "):
			changes++
		case strings.HasPrefix(line, "message: transactional: 1 prefix: walcast.backfill,"):
			i := strings.Index(line, "content:")
			p, err := decode.ParseBackfillChunk(data[i+len("content:"):])
			if err != nil {
				t.Fatalf("chunk message: %v", err)
			}
			chunks = append(chunks, chunkMessage{Backfill: p.Backfill, Chunk: p.Chunk, Sinks: p.Sinks, Rows: p.Rows})
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return changes, chunks
}

// chunksReadOnce fails when a chunk (or a row) was written into the WAL
// twice, and returns the rows the chunks carry. keyCol is the column
// index of a single-column key.
func chunksReadOnce(t testing.TB, chunks []chunkMessage, keyCol int) int {
	t.Helper()
	seen := map[[2]int64]bool{}
	keys := map[string]int64{}
	rows := 0
	for _, c := range chunks {
		id := [2]int64{c.Backfill, c.Chunk}
		if seen[id] {
			t.Fatalf("backfill %d chunk %d was read twice", c.Backfill, c.Chunk)
		}
		seen[id] = true
		for _, r := range c.Rows {
			k := *r[keyCol]
			if prev, ok := keys[k]; ok {
				t.Fatalf("row %s read by chunk %d and again by chunk %d", k, prev, c.Chunk)
			}
			keys[k] = c.Chunk
		}
		rows += len(c.Rows)
	}
	return rows
}

func backfillState(t testing.TB, db *pgx.Conn, id int64) (state string, rows, chunks int64) {
	t.Helper()
	err := db.QueryRow(context.Background(), `SELECT state, rows_done, chunks_done FROM walcast.backfills WHERE id = $1`, id).Scan(&state, &rows, &chunks)
	if err != nil {
		t.Fatal(err)
	}
	return state, rows, chunks
}

// requestBackfill runs walcast backfill and returns the new backfill's id.
func requestBackfill(t *testing.T, db *pgx.Conn, pipeline string, args ...string) int64 {
	t.Helper()
	out, errOut, code := walcastCmd(t, append([]string{"backfill", pipeline}, args...)...)
	if code != 0 {
		t.Fatalf("walcast backfill exited %d:\n%s%s", code, out, errOut)
	}
	var id int64
	if _, err := fmt.Sscanf(out, "backfill %d ", &id); err != nil {
		t.Fatalf("walcast backfill printed %q: %v", out, err)
	}
	return id
}

func countOp(evs []received, op string) int {
	n := 0
	for _, e := range evs {
		if e.Op == op {
			n++
		}
	}
	return n
}

// ---- tests ---------------------------------------------------------------

// TestBackfillCrashMirror backfills a table of existing rows while writers
// update, delete and insert throughout, SIGKILLs walcast twice during the
// backfill, and checks that a consumer applying the sink's events in order
// ends with a copy of the table, that every read id that arrived twice
// carried identical content, and that no committed chunk was read from the
// table twice.
func TestBackfillCrashMirror(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	dsn, db := newSource(t)
	const existing = 100000
	exec1(t, db, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	exec1(t, db, fmt.Sprintf(`INSERT INTO items SELECT g, 0, repeat('p', 40) FROM generate_series(1, %d) g`, existing))
	truthSlot(t, dsn, db, "truth_bfcrash")
	rcv := newReceiver(t)
	rcv.delay = 2 * time.Millisecond
	pipeline := writePipeline(t, "bfcrash", dsn, []string{"public.items"},
		sinkSpec{ID: "hook", URL: rcv.URL, Batch: 100, Extra: "    max_in_flight = 2\n"})
	proc := startCapturing(t, db, pipeline)

	// Writers run on their own connection from before the backfill until
	// after it, but never more than maxLag of WAL ahead of what the sink
	// has acknowledged. Unthrottled, one writer can commit changes faster
	// than the receiver takes them when the test process is slow (under
	// the race detector on a loaded machine the receiver's JSON decoding
	// is several times slower while the writer mostly waits on
	// PostgreSQL): the sink's lag then grows without bound, the backfill
	// (rightly kept within its window of chunks ahead of the
	// acknowledgements) advances one window per drained lag, and since
	// the writers stop only when the backfill is done, it never is.
	const maxLag = 8 << 20
	wdb := connect(t, dsn)
	wctx, stopWriters := context.WithCancel(ctx)
	var writes atomic.Int64
	writerDone := make(chan error, 1)
	go func() {
		r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
		next := existing + 1
		for wctx.Err() == nil {
			var sql string
			switch op := r.IntN(10); {
			case op < 5:
				lo := 1 + r.IntN(next)
				sql = fmt.Sprintf(`UPDATE items SET v = v + 1 WHERE id BETWEEN %d AND %d`, lo, lo+r.IntN(20))
			case op < 7:
				sql = fmt.Sprintf(`DELETE FROM items WHERE id = %d`, 1+r.IntN(next))
			default:
				sql = fmt.Sprintf(`INSERT INTO items VALUES (%d, 0, 'new')`, next)
				next++
			}
			if _, err := wdb.Exec(ctx, sql); err != nil {
				writerDone <- err
				return
			}
			if writes.Add(1)%25 == 0 {
				for wctx.Err() == nil {
					var lag int64
					err := wdb.QueryRow(ctx, `SELECT coalesce(pg_wal_lsn_diff(pg_current_wal_insert_lsn(), confirmed_flush_lsn), 0)::bigint
FROM pg_replication_slots WHERE slot_name = 'walcast_bfcrash'`).Scan(&lag)
					if err != nil {
						writerDone <- err
						return
					}
					if lag < maxLag {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}
		writerDone <- nil
	}()
	waitFor(t, "writers to start", 30*time.Second, func() bool { return writes.Load() > 50 })
	id := requestBackfill(t, db, pipeline, "--table", "public.items", "--sink", "hook")

	for kill, at := range []int{existing / 4, existing / 2} {
		waitFor(t, "read events before kill", 2*time.Minute, func() bool { return rcv.countOp("read") >= at })
		state, rows, _ := backfillState(t, db, id)
		if state != "running" || rows >= existing {
			t.Fatalf("kill %d would not land during the backfill: state %s, %d rows done", kill+1, state, rows)
		}
		proc.kill()
		t.Logf("kill %d: backfill at %d rows, %d read events received", kill+1, rows, rcv.countOp("read"))
		proc = startWalcast(t, pipeline)
	}
	waitFor(t, "backfill to finish", 3*time.Minute, func() bool { s, _, _ := backfillState(t, db, id); return s == "done" })
	stopWriters()
	if err := <-writerDone; err != nil {
		t.Fatal(err)
	}
	changes, chunks := committed(t, db, "truth_bfcrash", "public.items")
	readRows := chunksReadOnce(t, chunks, 0)
	_, rowsDone, chunksDone := backfillState(t, db, id)
	if int64(len(chunks)) != chunksDone || int64(readRows) != rowsDone {
		t.Fatalf("walcast.backfills records %d chunks / %d rows, the WAL holds %d / %d", chunksDone, rowsDone, len(chunks), readRows)
	}
	waitFor(t, fmt.Sprintf("%d changes and %d read rows to arrive", changes, readRows), 3*time.Minute,
		func() bool { return rcv.distinct() >= changes+readRows })
	proc.stop()
	evs := rcv.events()
	dups := sameContent(t, evs)
	checkRowMirror(t, db, "items", []string{"id"}, evs)
	t.Logf("%d existing rows, %d live changes, %d rows read in %d chunks, %d redeliveries, 2 SIGKILLs", existing, changes, readRows, len(chunks), dups)
}

// TestBackfillPerSinkKeys backfills tables with a composite text/uuid key
// and an empty table to one sink only: that sink's mirror equals the
// table, the other sink receives no read events.
func TestBackfillPerSinkKeys(t *testing.T) {
	parallel(t)
	dsn, db := newSource(t,
		`CREATE TABLE accts (region text, id uuid, n int, note text, PRIMARY KEY (region, id))`,
		`INSERT INTO accts SELECT 'r' || (g % 7), md5(g::text)::uuid, g, CASE WHEN g % 3 = 0 THEN NULL ELSE E'ä "q"\n\t\\ \x01' || g END FROM generate_series(1, 2500) g`,
		`CREATE TABLE empty_t (k text PRIMARY KEY, v int)`,
	)
	a, b := newReceiver(t), newReceiver(t)
	pipeline := writePipeline(t, "bfsink", dsn, []string{"public.accts", "public.empty_t"},
		sinkSpec{ID: "a", URL: a.URL}, sinkSpec{ID: "b", URL: b.URL})
	proc := startCapturing(t, db, pipeline)
	exec1(t, db, `UPDATE accts SET n = -n WHERE n % 10 = 0`)
	id := requestBackfill(t, db, pipeline, "--table", "public.accts", "--table", "public.empty_t", "--sink", "a", "--wait")
	exec1(t, db, `INSERT INTO empty_t VALUES ('after', 1)`)
	waitFor(t, "backfill to finish", time.Minute, func() bool { s, _, _ := backfillState(t, db, id); return s == "done" })
	waitFor(t, "events at a", time.Minute, func() bool { return countOp(a.events(), "read") >= 2500 && countOp(a.events(), "insert") >= 1 })
	waitFor(t, "events at b", time.Minute, func() bool { return countOp(b.events(), "insert") >= 1 })
	proc.stop()
	var accts []received
	for _, e := range a.events() {
		if e.Table == "accts" {
			accts = append(accts, e)
		}
	}
	checkRowMirror(t, db, "accts", []string{"region", "id"}, accts)
	if n := countOp(b.events(), "read"); n != 0 {
		t.Fatalf("sink b received %d read events of a backfill for sink a", n)
	}
	if n := countOp(b.events(), "update"); n != 250 {
		t.Fatalf("sink b received %d updates, want 250", n)
	}
	var e struct {
		Op  string          `json:"op"`
		Key json.RawMessage `json:"key"`
		Old json.RawMessage `json:"old"`
	}
	for _, r := range a.events() {
		if r.Op == "read" {
			json.Unmarshal(r.Raw, &e)
			if string(e.Old) != "null" || !strings.HasPrefix(string(e.Key), `{"region":`) {
				t.Fatalf("read event %s: key %s old %s", r.ID, e.Key, e.Old)
			}
			break
		}
	}
	_, rows, _ := backfillState(t, db, id+1)
	if rows != 0 {
		t.Fatalf("empty table backfill read %d rows", rows)
	}
	out, _, _ := walcastCmd(t, "status", pipeline)
	if !strings.Contains(out, "public.empty_t") || !strings.Contains(out, "done") {
		t.Fatalf("walcast status does not list the backfills:\n%s", out)
	}
}

// TestBackfillBadInput: each bad request is refused with a message and
// exit 1, and nothing is queued.
func TestBackfillBadInput(t *testing.T) {
	dsn, db := newSource(t,
		`CREATE TABLE good (id int PRIMARY KEY)`,
		`CREATE TABLE other (id int PRIMARY KEY)`,
		`CREATE TABLE nokey (v int)`,
		`ALTER TABLE nokey REPLICA IDENTITY FULL`,
	)
	pipeline := writePipeline(t, "bfbad", dsn, []string{"public.good", "public.nokey"}, sinkSpec{ID: "s", URL: "http://127.0.0.1:1/"})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--table", "public.missing"}, "not in the pipeline"},
		{[]string{"--table", "public.other"}, "not in the pipeline"},
		{[]string{"--table", "public.good", "--sink", "nosuch"}, `has no sink "nosuch"`},
		{[]string{"--table", "public.nokey"}, "no primary key or replica identity index"},
	} {
		out, errOut, code := walcastCmd(t, append([]string{"backfill", pipeline}, c.args...)...)
		if code != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("walcast backfill %v: exit %d, stdout %q, stderr %q; want exit 1 and %q", c.args, code, out, errOut, c.want)
		}
	}
	var n int
	db.QueryRow(context.Background(), `SELECT count(*) FROM pg_tables WHERE schemaname = 'walcast' AND tablename = 'backfills'`).Scan(&n)
	if n == 1 {
		db.QueryRow(context.Background(), `SELECT count(*) FROM walcast.backfills`).Scan(&n)
		if n != 0 {
			t.Fatalf("refused requests queued %d backfills", n)
		}
	}
	// No daemon runs: the first request waits; a second one for the same
	// table and sink is refused with the first one's id.
	id := requestBackfill(t, db, pipeline, "--table", "public.good")
	_, errOut, code := walcastCmd(t, "backfill", pipeline, "--table", "public.good", "--sink", "s")
	if code != 1 || !strings.Contains(errOut, fmt.Sprintf("by backfill %d", id)) {
		t.Fatalf("duplicate backfill: exit %d, stderr %q", code, errOut)
	}
	out, _, code := walcastCmd(t, "backfill", pipeline, "--table", "public.good", "--cancel")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("cancelled backfill %d", id)) {
		t.Fatalf("cancel: exit %d, stdout %q", code, out)
	}
	if s, _, _ := backfillState(t, db, id); s != "cancelled" {
		t.Fatalf("backfill %d is %s after --cancel", id, s)
	}
}

// TestBackfillNewTables: with backfill_new_tables, the tables of the first
// start are backfilled, and a table added to the pipeline later is
// backfilled when it first appears, the others not again.
func TestBackfillNewTables(t *testing.T) {
	parallel(t)
	dsn, db := newSource(t,
		`CREATE TABLE t1 (id int PRIMARY KEY, v text)`,
		`CREATE TABLE t2 (id bigint PRIMARY KEY, v text)`,
		`INSERT INTO t1 SELECT g, 'a' || g FROM generate_series(1, 300) g`,
		`INSERT INTO t2 SELECT g, 'b' || g FROM generate_series(1, 200) g`,
	)
	rcv := newReceiver(t)
	sink := sinkSpec{ID: "hook", URL: rcv.URL}
	withOption := func(path string) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.Replace(string(b), "  tables = [", "  backfill_new_tables = true\n  tables = [", 1)
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p1 := writePipeline(t, "bfnew", dsn, []string{"public.t1"}, sink)
	withOption(p1)
	proc := startWalcast(t, p1)
	waitFor(t, "t1's rows", time.Minute, func() bool { return countOp(rcv.events(), "read") >= 300 })
	proc.stop()
	p2 := writePipeline(t, "bfnew", dsn, []string{"public.t1", "public.t2"}, sink)
	withOption(p2)
	proc = startWalcast(t, p2)
	waitFor(t, "t2's rows", time.Minute, func() bool { return countOp(rcv.events(), "read") >= 500 })
	exec1(t, db, `INSERT INTO t1 VALUES (1000, 'live')`)
	waitFor(t, "the live insert", time.Minute, func() bool { return countOp(rcv.events(), "insert") >= 1 })
	proc.stop()
	perTable := map[string]int{}
	seen := map[pluginkit.EventID]bool{}
	for _, e := range rcv.events() {
		if e.Op == "read" && !seen[e.ID] {
			seen[e.ID] = true
			perTable[e.Table]++
		}
	}
	if perTable["t1"] != 300 || perTable["t2"] != 200 {
		t.Fatalf("read events per table: %v, want t1 300 (once) and t2 200", perTable)
	}
}

// TestBackfillColumnList backfills a table that a publication with a
// column list (PostgreSQL 15) publishes only in part: read events carry
// exactly the published columns, like the table's live events, and never
// a hidden one.
func TestBackfillColumnList(t *testing.T) {
	dsn, db := newSource(t,
		`CREATE TABLE cols (id int PRIMARY KEY, shown text, secret text)`,
		`INSERT INTO cols SELECT g, 'shown' || g, 'SECRET' || g FROM generate_series(1, 300) g`,
		`CREATE PUBLICATION colpub FOR TABLE cols (id, shown)`,
	)
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "bfcols", dsn, []string{"public.cols"}, sinkSpec{ID: "hook", URL: rcv.URL})
	withSource(t, pipeline, "  publication = \"colpub\"\n")
	proc := startCapturing(t, db, pipeline)
	exec1(t, db, `UPDATE cols SET shown = 'live', secret = 'SECRET-live' WHERE id = 7`)
	id := requestBackfill(t, db, pipeline, "--table", "public.cols", "--wait")
	waitFor(t, "read and update events", time.Minute, func() bool { return rcv.countOp("read") >= 300 && rcv.countOp("update") >= 1 })
	proc.stop()
	if s, rows, _ := backfillState(t, db, id); s != "done" || rows != 300 {
		t.Fatalf("backfill %s with %d rows, want done with 300", s, rows)
	}
	for _, e := range rcv.events() {
		var env struct {
			New map[string]json.RawMessage `json:"new"`
		}
		if err := json.Unmarshal(e.Raw, &env); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(e.Raw), "SECRET") || len(env.New) != 2 || env.New["id"] == nil || env.New["shown"] == nil {
			t.Fatalf("%s event %s carries columns the publication does not publish as listed: %s", e.Op, e.ID, e.Raw)
		}
	}
}

// rfFilter is TestBackfillRowFilter's publication row filter, and
// rfKeeps the same in Go. It leaves out every third id, the odd values of
// v (which the writers flip), and the whole range 3001..6000, so that
// some chunks find no row to read and must still move on.
const rfFilter = `(id % 3 <> 0 AND v % 2 = 0 AND (id <= 3000 OR id > 6000))`

func rfKeeps(row map[string]any) bool {
	id, _ := row["id"].(float64)
	v, _ := row["v"].(float64)
	return int(id)%3 != 0 && int(v)%2 == 0 && (id <= 3000 || id > 6000)
}

// TestBackfillRowFilter backfills a table that a publication walcast did
// not create publishes with a row filter (PostgreSQL 15), while writers
// move rows in and out of the filter: no read event carries a row the
// filter leaves out, and a consumer applying the sink's events in order
// ends with exactly the rows the filter keeps, which is what the live
// stream alone delivers for rows written after the slot.
func TestBackfillRowFilter(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	dsn, db := newSource(t)
	const existing = 20000
	// REPLICA IDENTITY FULL: a filter on v needs v in the replica
	// identity for the publication to publish updates and deletes.
	exec1(t, db, `CREATE TABLE rf (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	exec1(t, db, `ALTER TABLE rf REPLICA IDENTITY FULL`)
	exec1(t, db, fmt.Sprintf(`INSERT INTO rf SELECT g, g %% 5, 'p' || g FROM generate_series(1, %d) g`, existing))
	exec1(t, db, `CREATE PUBLICATION rfpub FOR TABLE rf WHERE `+rfFilter)
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "bfrf", dsn, []string{"public.rf"}, sinkSpec{ID: "hook", URL: rcv.URL})
	withSource(t, pipeline, "  publication = \"rfpub\"\n")
	proc := startCapturing(t, db, pipeline)

	// Writers flip v (in and out of the filter), delete and insert from
	// before the backfill until after it.
	wdb := connect(t, dsn)
	wctx, stopWriters := context.WithCancel(ctx)
	var writes atomic.Int64
	writerDone := make(chan error, 1)
	go func() {
		r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
		next := existing + 1
		tick := time.NewTicker(2 * time.Millisecond) // pace: the sink must keep up
		defer tick.Stop()
		for wctx.Err() == nil {
			var sql string
			switch op := r.IntN(10); {
			case op < 6:
				lo := 1 + r.IntN(next)
				sql = fmt.Sprintf(`UPDATE rf SET v = v + 1 WHERE id BETWEEN %d AND %d`, lo, lo+r.IntN(30))
			case op < 8:
				sql = fmt.Sprintf(`DELETE FROM rf WHERE id = %d`, 1+r.IntN(next))
			default:
				sql = fmt.Sprintf(`INSERT INTO rf VALUES (%d, %d, 'new')`, next, r.IntN(4))
				next++
			}
			if _, err := wdb.Exec(ctx, sql); err != nil {
				writerDone <- err
				return
			}
			writes.Add(1)
			select {
			case <-wctx.Done():
			case <-tick.C:
			}
		}
		writerDone <- nil
	}()
	waitFor(t, "writers to start", 30*time.Second, func() bool { return writes.Load() > 50 })
	before := writes.Load()
	id := requestBackfill(t, db, pipeline, "--table", "public.rf")
	waitFor(t, "backfill to finish", 3*time.Minute, func() bool { s, _, _ := backfillState(t, db, id); return s == "done" })
	during := writes.Load() - before
	stopWriters()
	if err := <-writerDone; err != nil {
		t.Fatal(err)
	}
	_, rowsDone, chunks := backfillState(t, db, id)
	waitFor(t, fmt.Sprintf("the %d read events", rowsDone), time.Minute, func() bool { return int64(rcv.countOp("read")) >= rowsDone })
	for _, r := range rcv.events() {
		if e := parseFull(t, r); r.Op == "read" && !rfKeeps(e.New) {
			t.Fatalf("read event %s carries a row the publication's row filter leaves out: %v", r.ID, e.New)
		}
	}
	waitMirrorWhere(t, db, "rf", rfFilter, []string{"id"}, rcv, 2*time.Minute)
	proc.stop()
	t.Logf("%d existing rows, %d writes during the backfill, %d rows read in %d chunks", existing, during, rowsDone, chunks)
}

// TestBackfillRowFilterAddedByHand adds a row filter by hand to the
// publication walcast created for a running pipeline: it survives a
// restart of walcast (which keeps the publication in step with the
// pipeline's tables), and the backfill honours it like the live stream
// does.
func TestBackfillRowFilterAddedByHand(t *testing.T) {
	parallel(t)
	dsn, db := newSource(t)
	const filter = `(id % 3 <> 0)`
	exec1(t, db, `CREATE TABLE rfh (id int PRIMARY KEY, v text)`)
	exec1(t, db, `INSERT INTO rfh SELECT g, 'v' || g FROM generate_series(1, 3000) g`)
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "bfrfh", dsn, []string{"public.rfh"}, sinkSpec{ID: "hook", URL: rcv.URL})
	proc := startCapturing(t, db, pipeline)
	exec1(t, db, `ALTER PUBLICATION walcast_bfrfh SET TABLE public.rfh WHERE `+filter)
	exec1(t, db, `UPDATE rfh SET v = 'live' WHERE id IN (4, 6)`)
	proc.stop()
	proc = startWalcast(t, pipeline)
	waitFor(t, "walcast to stream again", time.Minute, func() bool {
		var active bool
		db.QueryRow(context.Background(), `SELECT active FROM pg_replication_slots WHERE slot_name = 'walcast_bfrfh'`).Scan(&active)
		return active
	})
	var kept *string
	if err := db.QueryRow(context.Background(), `SELECT rowfilter FROM pg_publication_tables WHERE pubname = 'walcast_bfrfh' AND tablename = 'rfh'`).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	if kept == nil {
		t.Fatal("restarting walcast dropped the row filter added by hand to its publication")
	}
	exec1(t, db, `UPDATE rfh SET v = 'restarted' WHERE id IN (10, 12)`)
	id := requestBackfill(t, db, pipeline, "--table", "public.rfh", "--wait")
	exec1(t, db, `DELETE FROM rfh WHERE id IN (7, 9)`)
	exec1(t, db, `INSERT INTO rfh VALUES (3001, 'after'), (3003, 'after')`)
	if s, rows, _ := backfillState(t, db, id); s != "done" || rows != 2000 {
		t.Fatalf("backfill %s with %d rows, want done with the 2000 rows the filter keeps", s, rows)
	}
	waitFor(t, "the 2000 read events", time.Minute, func() bool { return rcv.countOp("read") >= 2000 })
	for _, r := range rcv.events() {
		if e := parseFull(t, r); r.Op == "read" && int(e.New["id"].(float64))%3 == 0 {
			t.Fatalf("read event %s carries a row the publication's row filter leaves out: %v", r.ID, e.New)
		}
	}
	waitMirrorWhere(t, db, "rfh", filter, []string{"id"}, rcv, time.Minute)
	proc.stop()
}

// waitMirrorWhere waits until applying rcv's events leaves a mirror equal
// to the rows of table that where keeps, and fails naming the rows that
// differ when that does not happen within d.
func waitMirrorWhere(t testing.TB, db *pgx.Conn, table, where string, keyCols []string, rcv *receiver, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if diffs, _ := mirrorDiff(t, db, table, where, keyCols, rcv.events()); len(diffs) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	checkRowMirrorWhere(t, db, table, where, keyCols, rcv.events())
}
