package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/pgtest"
	"github.com/walcast/walcast/pluginkit"
)

// s3Workload commits at least n changes to items and items2 in
// transactions of mixed size: inserts, updates, deletes, updates that
// change the key (id + 10,000,000), TRUNCATEs of one table and of both,
// and now and then several statements in one transaction.
func s3Workload(ctx context.Context, db *pgx.Conn, r *rand.Rand, n int) (int, error) {
	sizes := []int{1, 1, 2, 5, 10, 50, 200, 1000}
	next, changes := 1, 0
	for changes < n {
		size := sizes[r.IntN(len(sizes))]
		table := []string{"items", "items2"}[r.IntN(2)]
		lo := 1 + r.IntN(next)
		var sql string
		switch op := r.IntN(40); {
		case next < 2*size || op < 16:
			sql = fmt.Sprintf(`INSERT INTO %s (id, v, pad) SELECT g, 0, repeat('x', 50) FROM generate_series(%d, %d) g`, table, next, next+size-1)
			next += size
		case op < 26:
			sql = fmt.Sprintf(`UPDATE %s SET v = v + 1 WHERE id BETWEEN %d AND %d`, table, lo, lo+size-1)
		case op < 31:
			sql = fmt.Sprintf(`DELETE FROM %s WHERE id BETWEEN %d AND %d`, table, lo, lo+size-1)
		case op < 37:
			sql = fmt.Sprintf(`UPDATE %s SET id = id + 10000000, v = v + 1 WHERE id BETWEEN %d AND %d`, table, lo, lo+size-1)
		case op < 39:
			sql = `TRUNCATE items2`
		default:
			sql = `TRUNCATE items, items2`
		}
		tag, err := db.Exec(ctx, sql)
		if err != nil {
			return changes, fmt.Errorf("%s: %w", sql, err)
		}
		changes += max(1, int(tag.RowsAffected()))
		if r.IntN(4) == 0 {
			err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `UPDATE items SET v = v + 1 WHERE id = (SELECT min(id) FROM items)`); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `INSERT INTO items2 VALUES ($1, 0, 'y')`, next)
				return err
			})
			if err != nil {
				return changes, err
			}
			next++
			changes += 2
		}
	}
	return changes, nil
}

// TestS3CrashLoop is the s3 sink's promise under host crashes
// (docs/sinks.md, "s3"): walcast is SIGKILLed five times while a workload
// of inserts, updates, deletes, key changes and TRUNCATEs on two tables
// streams into gofakes3 as zstd-compressed JSON lines. Afterwards boto3
// lists and fetches every object: each decodes whole and holds what its
// key and metadata say; every change test_decoding saw is there,
// byte-identical in every copy; an event is in two objects only within
// the batch a kill interrupted (at most one run of duplicates per table
// and kill); and the mirror built from the objects in id order equals
// each table.
func TestS3CrashLoop(t *testing.T) {
	parallel(t)
	needS3Clients(t)
	ctx := context.Background()
	start := time.Now()
	const name = "s3crash"
	dsn, db := newSource(t,
		`CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`,
		`CREATE TABLE items2 (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	tables := map[string]bool{"public.items": true, "public.items2": true}
	truthSlot(t, dsn, db, "truth_"+name)
	srv := startS3(t)
	pipeline := writePipeline(t, name, dsn, []string{"public.items", "public.items2"}, sinkSpec{
		ID: "lake", SinkType: "s3", Batch: 200, Config: s3SinkConfig(srv, "cdc", "    compression = \"zstd\"\n"),
	})
	s3Credentials(t, pipeline, "lake")
	cpKey := "cdc/_walcast/" + name + ".lake.checkpoint.json"

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 11))
	kills := pgtest.Chaos(t, 5)
	procs := []*walcastProc{startCapturing(t, db, pipeline)}
	wdb := connect(t, dsn)
	workDone := make(chan error, 1)
	var worked atomic.Bool
	go func() {
		_, err := s3Workload(ctx, wdb, rand.New(rand.NewPCG(seed, 12)), 20000)
		worked.Store(true)
		workDone <- err
	}()

	var workEnd uint64
	ahead, landed := 0, 0
	for kill := 1; kill <= kills; kill++ {
		// Kill at a random point while objects are being written: the
		// workload makes ~200 objects, and a restarted walcast catches up
		// on a backlog quickly, so the kills come a few objects apart.
		target := srv.objectCount("cdc/") + 1 + r.IntN(10)
		drained := false
		waitFor(t, "objects before kill", 2*time.Minute, func() bool {
			if worked.Load() && workEnd == 0 {
				workEnd = lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
			}
			drained = workEnd != 0 && confirmedFlush(t, db, "walcast_"+name) >= workEnd
			return srv.objectCount("cdc/") >= target || drained
		})
		if drained {
			if kill <= 2 {
				t.Fatalf("the workload was stored whole after %d kills; the loop needs at least 2 mid-stream", kill-1)
			}
			t.Logf("workload stored whole after %d kills; skipping the rest", kill-1)
			break
		}
		time.Sleep(time.Duration(r.IntN(200)) * time.Millisecond)
		procs[len(procs)-1].kill()
		landed++
		var host string
		db.QueryRow(ctx, `SELECT coalesce(max(event_id), '') FROM walcast.checkpoints WHERE sink = 'lake'`).Scan(&host)
		hostID, _ := pluginkit.ParseEventID(host)
		cp := srv.checkpoint(t, cpKey)
		line := fmt.Sprintf("kill %d (%s): %d objects; walcast.checkpoints %q, the sink's checkpoint object %s",
			kill, time.Since(start).Round(time.Millisecond), srv.objectCount("cdc/"), host, cp)
		if cp.Compare(hostID) > 0 {
			ahead++
			line += " (ahead: stored, ack not recorded)"
		}
		t.Log(line)
		procs = append(procs, startWalcast(t, pipeline))
	}
	if err := <-workDone; err != nil {
		t.Fatal(err)
	}
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	want := s3Truth(t, db, "truth_"+name, tables)
	waitFor(t, fmt.Sprintf("slot to confirm all %d changes", len(want)), 3*time.Minute, func() bool {
		return confirmedFlush(t, db, "walcast_"+name) >= end
	})
	procs[len(procs)-1].stop()

	objs := readBucket(t, srv, "cdc/")
	evs := inIDOrder(jsonlEvents(t, objs))
	dups := verify(t, want, receivedOf(evs))
	runs := duplicateRuns(evs)
	for table, n := range runs {
		if n > landed {
			t.Errorf("table %s: %d runs of events stored twice after %d kills; docs/sinks.md promises at most one per kill (the batch being written)", table, n, landed)
		}
	}
	checkMirror(t, db, s3Mirror(t, evs), "items", "items2")
	skipped := 0
	for _, p := range procs {
		skipped += countLines(p.logText(), `msg="skipped events already stored"`)
	}
	t.Logf("%d changes, %d kills (%d with the sink's checkpoint ahead of walcast.checkpoints), %d objects, %d events stored twice in %v runs, %d batches the sink skipped as stored, in %s",
		len(want), landed, ahead, len(objs), dups, runs, skipped, time.Since(start).Round(time.Second))
}

// duplicateRuns counts, per table, the runs of consecutive events (in the
// table's id order) that are stored in more than one object.
func duplicateRuns(evs []s3Stored) map[string]int {
	runs := map[string]int{}
	inRun := map[string]bool{}
	for i := 0; i < len(evs); {
		j := i + 1
		for j < len(evs) && evs[j].ID == evs[i].ID {
			j++
		}
		table := evs[i].Table
		dup := j-i > 1
		if dup && !inRun[table] {
			runs[table]++
		}
		inRun[table] = dup
		i = j
	}
	return runs
}

// TestS3Errors: what a missing bucket, refused credentials, 503 SlowDown
// and a connection cut mid-upload do, as docs/sinks.md says: the first two
// stop walcast at start with the cause and nothing parked; a throttle
// pauses the sink without counting attempts; a network error is retried;
// either way every change arrives and nothing is parked.
func TestS3Errors(t *testing.T) {
	needS3Clients(t)
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL DEFAULT 0)`)
	srv := startS3(t)

	t.Run("missing bucket", func(t *testing.T) {
		cfg := strings.Replace(s3SinkConfig(srv, "x", ""), `bucket = "lake"`, `bucket = "missing"`, 1)
		p := writePipeline(t, "s3nobucket", dsn, []string{"public.items"}, sinkSpec{ID: "lake", SinkType: "s3", Config: cfg})
		s3Credentials(t, p, "lake")
		out := runOnce(t, p)
		wantAll(t, out, `bucket "missing" does not exist`, "NoSuchBucket", "create it or set bucket to an existing one")
		if n := parkedCount(db, "s3nobucket"); n != 0 {
			t.Errorf("%d events parked", n)
		}
	})
	t.Run("wrong credentials", func(t *testing.T) {
		p := writePipeline(t, "s3badkey", dsn, []string{"public.items"}, sinkSpec{ID: "lake", SinkType: "s3",
			Config: s3SinkConfig(srv, "x", "    access_key_id = \"AKIAWRONG\"\n    secret_access_key = \"nope\"\n")})
		out := runOnce(t, p)
		wantAll(t, out, "refuses the credentials (InvalidAccessKeyId)", "check access_key_id and secret_access_key")
	})
	t.Run("throttle and dropped connections", func(t *testing.T) {
		const name = "s3faults"
		p := writePipeline(t, name, dsn, []string{"public.items"}, sinkSpec{ID: "lake", SinkType: "s3", Batch: 10,
			Config: s3SinkConfig(srv, "faults", "    compression = \"gzip\"\n")})
		s3Credentials(t, p, "lake")
		w := startCapturing(t, db, p)
		w.waitLog(t, "streaming from slot")
		srv.slowDown.Store(3)
		insertItems(t, db, 1, 20)
		waitFor(t, "three SlowDown answers", time.Minute, func() bool { return srv.throttled.Load() >= 3 })
		w.waitLog(t, "throttles requests (SlowDown)")
		srv.dropUploads.Store(true)
		insertItems(t, db, 21, 20)
		waitFor(t, "uploads cut", time.Minute, func() bool { return srv.dropped.Load() >= 3 })
		srv.dropUploads.Store(false)
		end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
		waitFor(t, "slot to confirm", 2*time.Minute, func() bool { return confirmedFlush(t, db, "walcast_"+name) >= end })
		w.stop()
		evs := inIDOrder(jsonlEvents(t, readBucket(t, srv, "faults/")))
		if got := len(keysOf(evs, func(e s3Stored) string { return e.Key })); got != 40 {
			t.Errorf("%d rows stored, want 40", got)
		}
		if n := parkedCount(db, name); n != 0 {
			t.Errorf("%d events parked", n)
		}
		t.Logf("%d SlowDown answers, %d uploads cut, %d events stored", srv.throttled.Load(), srv.dropped.Load(), len(evs))
	})
}

// TestS3ParquetMatchesJSON: the same changes of a table with many column
// types go to two s3 sinks, one writing JSON lines and one Parquet.
// hyparquet, a reader sharing no code with the sink's parquet-go, reads
// every Parquet object; each row's envelope columns and row values have
// the types docs/sinks.md gives and the values of the JSON envelope of the
// same event, and each event is in exactly one row.
func TestS3ParquetMatchesJSON(t *testing.T) {
	needS3Clients(t)
	const name = "s3pq"
	dsn, db := newSource(t, `CREATE TABLE typed (id int PRIMARY KEY, big bigint, f float8, n numeric, t text,
		b bool, j jsonb, ts timestamptz, bin bytea, arr int[], mixed float8, note text)`)
	srv := startS3(t)
	p := writePipeline(t, name, dsn, []string{"public.typed"},
		sinkSpec{ID: "js", SinkType: "s3", Batch: 20, Config: s3SinkConfig(srv, "json", "")},
		sinkSpec{ID: "pq", SinkType: "s3", Batch: 20, Config: s3SinkConfig(srv, "pq", "    format = \"parquet\"\n")})
	s3Credentials(t, p, "js")
	s3Credentials(t, p, "pq")
	w := startCapturing(t, db, p)
	for _, sql := range []string{
		`INSERT INTO typed SELECT g, g * 10000000000, g / 3.0, (g * 1.1)::numeric, 'row "' || g || '" é',
			g % 2 = 0, jsonb_build_object('g', g, 'a', jsonb_build_array(1, 'x', null)), '2026-11-30 10:00:00.123456+00'::timestamptz + g * interval '1 hour',
			decode('00ff' || lpad(to_hex(g), 2, '0'), 'hex'), ARRAY[g, g + 1], g, NULL FROM generate_series(1, 60) g`,
		`UPDATE typed SET mixed = 'NaN', note = 'nan' WHERE id % 7 = 0`,
		`UPDATE typed SET mixed = 'Infinity', f = 2 WHERE id % 11 = 0`,
		`UPDATE typed SET id = id + 1000, big = NULL WHERE id BETWEEN 20 AND 24`,
		`DELETE FROM typed WHERE id BETWEEN 30 AND 35`,
		`TRUNCATE typed`,
		`INSERT INTO typed (id, t) VALUES (1, 'after the truncate')`,
	} {
		exec1(t, db, sql)
	}
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	waitFor(t, "slot to confirm", 2*time.Minute, func() bool { return confirmedFlush(t, db, "walcast_"+name) >= end })
	w.stop()

	byID := map[pluginkit.EventID]s3Stored{}
	for _, e := range jsonlEvents(t, readBucket(t, srv, "json/")) {
		byID[e.ID] = e
	}
	var files []string
	for _, o := range readBucket(t, srv, "pq/") {
		if strings.HasSuffix(o.Key, ".parquet") {
			files = append(files, o.File)
		}
	}
	rows := 0
	seen := map[pluginkit.EventID]bool{}
	for i, f := range readParquet(t, files) {
		if i == 0 && len(f.Rows) > 0 {
			t.Logf("a row as hyparquet reads it: %s", toJSON(f.Rows[0]))
		}
		checkParquetSchema(t, f)
		for _, row := range f.Rows {
			id := compareParquetRow(t, row, byID)
			if seen[id] {
				t.Errorf("event %s in two Parquet rows", id)
			}
			seen[id] = true
			rows++
		}
	}
	if rows != len(byID) {
		t.Errorf("%d Parquet rows, %d JSON events", rows, len(byID))
	}
	t.Logf("%d events: %d Parquet files read by hyparquet, every row equal to its JSON envelope", len(byID), len(files))
}

// TestS3IdleSinkFlushes is what stands for a flush interval
// (docs/sinks.md, "Object sizes and age"): the sink asks for batches of
// 10000 and buffers nothing, and walcast hands an idle sink what is
// queued at once, so a single change becomes an object without waiting
// for a full batch or a timer; so does the next one after a pause.
func TestS3IdleSinkFlushes(t *testing.T) {
	needS3Clients(t)
	const name = "s3idle"
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL DEFAULT 0)`)
	srv := startS3(t)
	p := writePipeline(t, name, dsn, []string{"public.items"}, sinkSpec{ID: "lake", SinkType: "s3",
		Config: s3SinkConfig(srv, "idle", "")})
	s3Credentials(t, p, "lake")
	w := startCapturing(t, db, p)
	w.waitLog(t, "streaming from slot")
	for i, id := range []int{1, 2} {
		start := time.Now()
		insertItems(t, db, id, 1)
		waitFor(t, fmt.Sprintf("the object of change %d", i+1), 30*time.Second, func() bool {
			return srv.objectCount("idle/public.items/") == i+1
		})
		t.Logf("change %d stored %s after its commit", i+1, time.Since(start).Round(time.Millisecond))
	}
	w.stop()
	evs := jsonlEvents(t, readBucket(t, srv, "idle/public.items/"))
	if len(evs) != 2 || evs[0].Key == evs[1].Key {
		t.Fatalf("%d events stored, want the two inserts, one object each", len(evs))
	}
}
