package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/pgtest"
	"github.com/walcast/walcast/pluginkit"
)

// The postgres sink against a second PostgreSQL cluster, started by the
// test: its target tables are made from the source's own definition
// (pg_dump --schema-only), an audit trigger on the target records every
// row the sink writes, test_decoding is the truth of what was committed,
// and psql reads both databases back.

// pgItems has a column of most of the types the envelope encodes
// differently (numbers, numeric as text, timestamps, arrays, jsonb, bytea
// as base64, booleans, floats).
const pgItems = `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text, amount numeric(12,2),
	at timestamptz, tags text[], doc jsonb, blob bytea, flag boolean, f float8)`

// pgTarget is the target cluster and one database in it.
type pgTarget struct {
	c   *pgtest.Cluster
	dsn string
	db  *pgx.Conn
}

func newTarget(t *testing.T) *pgTarget {
	t.Helper()
	c := pgtest.New(t, pgtest.Options{})
	dsn := c.Database(t)
	return &pgTarget{c: c, dsn: dsn, db: connect(t, dsn)}
}

// copySchema creates the source's table in the target the way an operator
// would, with pg_dump --schema-only, then an audit trigger that records
// every row written to it.
func (tg *pgTarget) copySchema(t *testing.T, srcDSN, table string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	file := filepath.Join(cluster.Dir, "schema_"+strconv.FormatInt(time.Now().UnixNano(), 36)+".sql")
	if out, err := cluster.Command(ctx, "pg_dump", "--schema-only", "--table="+table, "-f", file, "-d", srcDSN).CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	os.Chmod(file, 0o644)
	if out, err := tg.c.Command(ctx, "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", tg.dsn, "-f", file).CombinedOutput(); err != nil {
		t.Fatalf("psql -f %s: %v\n%s", file, err, out)
	}
	exec1(t, tg.db, `CREATE TABLE applied (n bigserial, op text, id int, v int)`)
	exec1(t, tg.db, `CREATE FUNCTION log_applied() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF TG_OP = 'DELETE' THEN INSERT INTO applied (op, id, v) VALUES ('D', OLD.id, OLD.v);
			ELSE INSERT INTO applied (op, id, v) VALUES (left(TG_OP, 1), NEW.id, NEW.v); END IF;
			RETURN NULL;
		END $$`)
	exec1(t, tg.db, `CREATE TRIGGER log_applied AFTER INSERT OR UPDATE OR DELETE ON `+table+` FOR EACH ROW EXECUTE FUNCTION log_applied()`)
}

// dumpRows is every row of table, every column, as psql's COPY prints
// them, in key order.
func dumpRows(t testing.TB, c *pgtest.Cluster, dsn, table string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := c.Command(ctx, "psql", "-X", "-At", "-d", dsn, "-c", "COPY (SELECT * FROM "+table+" ORDER BY id) TO STDOUT").Output()
	if err != nil {
		t.Fatalf("psql COPY %s: %v", table, err)
	}
	return string(out)
}

// checkSameRows fails unless the target's table holds exactly the
// source's rows, every column equal as PostgreSQL prints it.
func checkSameRows(t testing.TB, srcDSN string, tg *pgTarget, table string) {
	t.Helper()
	src, dst := dumpRows(t, cluster, srcDSN, table), dumpRows(t, tg.c, tg.dsn, table)
	if src == dst {
		t.Logf("%s: target equals source, %d rows, all columns", table, strings.Count(src, "\n"))
		return
	}
	sl, dl := strings.Split(src, "\n"), strings.Split(dst, "\n")
	for i := range min(len(sl), len(dl)) {
		if sl[i] != dl[i] {
			t.Fatalf("%s differs at row %d of %d (target %d rows):\nsource %s\ntarget %s", table, i, len(sl)-1, len(dl)-1, sl[i], dl[i])
		}
	}
	t.Fatalf("%s: source has %d rows, target %d", table, len(sl)-1, len(dl)-1)
}

// tdItem is one committed change of public.items as test_decoding told it.
type tdItem struct {
	xid        uint32
	idx        int
	op         string
	id         string // the new key; the deleted key for a delete
	keyChanged bool   // an update that changed the key
}

var (
	tdItemChange = regexp.MustCompile(`^table public\.items: (INSERT|UPDATE|DELETE|TRUNCATE):`)
	tdFirstID    = regexp.MustCompile(`id\[integer\]:(-?\d+)`)
	tdNewID      = regexp.MustCompile(`new-tuple: id\[integer\]:(-?\d+)`)
)

// itemTruth reads the test_decoding slot's changes of public.items (the
// only published table), with the index walcast gives each.
func itemTruth(t testing.TB, db *pgx.Conn, slot string) []tdItem {
	t.Helper()
	rows, err := db.Query(context.Background(),
		`SELECT data FROM pg_logical_slot_peek_changes($1, NULL, NULL, 'include-xids', '1', 'skip-empty-xacts', '1')`, slot)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []tdItem
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
		m := tdItemChange.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		c := tdItem{xid: xid, idx: idx, op: strings.ToLower(m[1])}
		if id := tdFirstID.FindStringSubmatch(line); id != nil {
			c.id = id[1]
		}
		if n := tdNewID.FindStringSubmatch(line); n != nil {
			c.id, c.keyChanged = n[1], true
		}
		out = append(out, c)
		idx++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkAppliedOnce compares the audit of the target with the truth: each
// committed insert and update wrote one row, each delete deleted one, an
// update that changed the key did both; so a change applied twice, or not
// at all, shows up in the count, and a repeated (op, id, v) (each write of
// the workload has one of its own) names the change applied twice.
func checkAppliedOnce(t testing.TB, tg *pgTarget, want []tdItem) {
	t.Helper()
	expect := 0
	for _, c := range want {
		switch {
		case c.op == "truncate":
		case c.keyChanged:
			expect += 2
		default:
			expect++
		}
	}
	got := queryInt(t, tg.db, `SELECT count(*) FROM applied`)
	twice := queryInt(t, tg.db, `SELECT count(*) FROM (SELECT 1 FROM applied GROUP BY op, id, v HAVING count(*) > 1) d`)
	if twice > 0 || got != expect {
		t.Fatalf("the target's audit has %d row writes (%d written more than once), the %d committed changes make %d: not exactly once", got, twice, len(want), expect)
	}
	t.Logf("%d committed changes of items, %d row writes in the target: each applied exactly once", len(want), got)
}

// checkHistoryOnce checks that the history table holds exactly one row
// per committed change, with its op and key.
func checkHistoryOnce(t testing.TB, tg *pgTarget, want []tdItem) {
	t.Helper()
	type at struct {
		xid uint32
		idx int
	}
	rows, err := tg.db.Query(context.Background(), `SELECT xid, idx, op, coalesce(key->>'id', ''), count(*) OVER (PARTITION BY lsn, idx) FROM walcast_history WHERE table_name = 'items'`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[at]tdItem{}
	for rows.Next() {
		var c tdItem
		var n int
		var x int64
		if err := rows.Scan(&x, &c.idx, &c.op, &c.id, &n); err != nil {
			t.Fatal(err)
		}
		c.xid = uint32(x)
		if n != 1 {
			t.Fatalf("history holds change %d of xid %d %d times", c.idx, c.xid, n)
		}
		got[at{c.xid, c.idx}] = c
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		g, ok := got[at{w.xid, w.idx}]
		switch {
		case !ok:
			t.Fatalf("history lacks change %d of xid %d (%s id %s)", w.idx, w.xid, w.op, w.id)
		case g.op != w.op || g.id != w.id:
			t.Fatalf("history has change %d of xid %d as %s id %s, committed was %s id %s", w.idx, w.xid, g.op, g.id, w.op, w.id)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("history has %d rows, %d changes were committed", len(got), len(want))
	}
	t.Logf("history: exactly one row per committed change (%d)", len(want))
}

// itemsWorkload commits at least n changes to items in transactions of
// mixed size: inserts of new rows, updates, deletes, updates that change
// the key (id + 1000000), and two TRUNCATEs along the way.
func itemsWorkload(ctx context.Context, db *pgx.Conn, r *rand.Rand, n int) error {
	sizes := []int{1, 1, 2, 5, 10, 50, 200, 500}
	next, changes, truncates := 1, 0, 0
	for changes < n {
		size := sizes[r.IntN(len(sizes))]
		lo := 1 + r.IntN(next)
		var sql string
		switch op := r.IntN(20); {
		case truncates < 2 && changes > (truncates+1)*n/3:
			sql = `TRUNCATE items`
			truncates++
		case next < 2*size || op < 9:
			sql = fmt.Sprintf(`INSERT INTO items SELECT g, 0, repeat('x', 40), g * 1.25, now(), ARRAY['t', g::text],
				jsonb_build_object('id', g, 'n', jsonb_build_object('k', 'v')), decode(md5(g::text), 'hex'), g %% 2 = 0, g / 3.0
				FROM generate_series(%d, %d) g`, next, next+size-1)
			next += size
		case op < 15:
			sql = fmt.Sprintf(`UPDATE items SET v = v + 1, amount = amount + 0.01, doc = doc || jsonb_build_object('v', v + 1), tags = tags || v::text
				WHERE id BETWEEN %d AND %d OR id BETWEEN %d AND %d`, lo, lo+size-1, lo+1000000, lo+1000000+size-1)
		case op < 17:
			sql = fmt.Sprintf(`UPDATE items SET id = id + 1000000 WHERE id BETWEEN %d AND %d`, lo, lo+size-1)
		default:
			sql = fmt.Sprintf(`DELETE FROM items WHERE id BETWEEN %d AND %d`, lo, lo+size-1)
		}
		tag, err := db.Exec(ctx, sql)
		if err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
		changes += int(tag.RowsAffected()) + 1
	}
	return nil
}

// pgSinks are a mirror and a history sink writing into the target.
func pgSinks(targetDSN string, mirrorExtra string) []sinkSpec {
	return []sinkSpec{
		{ID: "mirror", SinkType: "postgres", Batch: 50, Extra: mirrorExtra,
			Config: fmt.Sprintf("    dsn = %q\n    create_tables = false\n", targetDSN)},
		{ID: "history", SinkType: "postgres", Batch: 200,
			Config: fmt.Sprintf("    dsn = %q\n    mode = \"history\"\n", targetDSN)},
	}
}

// pgCheckpoints reads the mirror sink's checkpoint in walcast.checkpoints
// and in the target's checkpoint table.
func pgCheckpoints(t testing.TB, db *pgx.Conn, tg *pgTarget) (host, target pluginkit.EventID) {
	t.Helper()
	var h, g string
	db.QueryRow(context.Background(), `SELECT coalesce(max(event_id), '') FROM walcast.checkpoints WHERE sink = 'mirror'`).Scan(&h)
	tg.db.QueryRow(context.Background(), `SELECT coalesce(max(event_id), '') FROM walcast_checkpoints`).Scan(&g)
	host, _ = pluginkit.ParseEventID(h) // zero when there is none yet
	target, _ = pluginkit.ParseEventID(g)
	return host, target
}

var pgSkipped = regexp.MustCompile(`msg="skipped events already applied to the target".* duplicates=(\d+)`)

// TestPostgresSinkCrashLoop is the postgres sink's promise under host
// crashes: walcast is SIGKILLed five times (WALCAST_CHAOS scales it) while
// writers insert, update, delete, change keys and truncate; afterwards the
// mirror equals the source table in every column, the audit on the target
// shows every committed change applied exactly once, and the history table
// holds exactly one row per committed change. Then the target table is
// emptied by hand and `walcast backfill` makes it equal again.
func TestPostgresSinkCrashLoop(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	name := "pgcrash"
	dsn, db := newSource(t, pgItems)
	truthSlot(t, dsn, db, "truth_"+name)
	tg := newTarget(t)
	tg.copySchema(t, dsn, "public.items")
	pipeline := writePipeline(t, name, dsn, []string{"public.items"}, pgSinks(tg.dsn, "")...)

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 7))
	wdb := connect(t, dsn)
	proc := startWalcast(t, pipeline)
	waitSlot(t, db, "walcast_"+name)
	const changes = 12000
	workDone := make(chan error, 1)
	var worked atomic.Bool
	go func() {
		err := itemsWorkload(ctx, wdb, rand.New(rand.NewPCG(seed, 8)), changes)
		worked.Store(true)
		workDone <- err
	}()

	ahead := 0 // kills after which the target held changes walcast had no ack for
	applied := func() int { return queryInt(t, tg.db, `SELECT count(*) FROM applied`) }
	proc, logs := crashLoop(t, db, name, pipeline, proc, r, changes, &worked, applied, func(kill int) {
		line := fmt.Sprintf("kill %d: walcast SIGKILLed at %d row writes in the target", kill, applied())
		if host, target := pgCheckpoints(t, db, tg); target.Compare(host) > 0 {
			ahead++
			line += fmt.Sprintf("; the target's checkpoint %s is ahead of walcast.checkpoints %s: applied, ack not recorded", target, host)
		}
		t.Log(line)
	})
	if err := <-workDone; err != nil {
		t.Fatal(err)
	}
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	waitFor(t, "slot to confirm the workload", 3*time.Minute, func() bool { return confirmedFlush(t, db, "walcast_"+name) >= end })

	want := itemTruth(t, db, "truth_"+name)
	checkSameRows(t, dsn, tg, "public.items")
	checkAppliedOnce(t, tg, want)
	checkHistoryOnce(t, tg, want)
	dups := 0
	for _, p := range logs {
		for _, m := range pgSkipped.FindAllStringSubmatch(p.logText(), -1) {
			n, _ := strconv.Atoi(m[1])
			dups += n
		}
	}
	t.Logf("%d kills with the target ahead of walcast's checkpoint; %d redelivered events skipped by the mirror as at or below its checkpoint", ahead, dups)
	if ahead == 0 {
		t.Errorf("no kill landed between a commit in the target and walcast recording its ack; the loop did not test what it claims")
	}

	// A damaged mirror, rebuilt from the source's rows.
	exec1(t, tg.db, `TRUNCATE items`)
	id := requestBackfill(t, db, pipeline, "--table", "public.items", "--sink", "mirror")
	waitFor(t, "backfill to finish", 3*time.Minute, func() bool { s, _, _ := backfillState(t, db, id); return s == "done" })
	end = lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	waitFor(t, "slot to confirm the backfill", 3*time.Minute, func() bool { return confirmedFlush(t, db, "walcast_"+name) >= end })
	checkSameRows(t, dsn, tg, "public.items")
	proc.stop()
}

// crashLoop SIGKILLs walcast pgtest.Chaos(t, 5) times while the
// workload runs, each time once a random share of its changes more has
// arrived (progress counts what arrived), and starts it again; onKill
// reports on each kill. It stops early once the slot confirmed the whole
// workload (worked says the writers are done), failing when that came
// before the third kill. It returns the last process and every process
// started, the first included.
func crashLoop(t *testing.T, db *pgx.Conn, name, pipeline string, proc *walcastProc, r *rand.Rand, changes int,
	worked *atomic.Bool, progress func() int, onKill func(kill int)) (*walcastProc, []*walcastProc) {
	t.Helper()
	all := []*walcastProc{proc}
	kills := pgtest.Chaos(t, 5)
	var workEnd uint64
	for kill := 1; kill <= kills; kill++ {
		target := progress() + 1 + r.IntN(changes/(kills+1))
		drained := false
		waitFor(t, "changes to arrive before kill", 2*time.Minute, func() bool {
			if worked.Load() && workEnd == 0 {
				workEnd = lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
			}
			drained = workEnd != 0 && confirmedFlush(t, db, "walcast_"+name) >= workEnd
			return progress() >= target || drained
		})
		if drained {
			if kill <= 2 {
				t.Fatalf("the workload arrived whole after %d kills; the loop needs at least 2 mid-stream", kill-1)
			}
			t.Logf("workload arrived whole after %d kills; skipping the rest", kill-1)
			break
		}
		time.Sleep(time.Duration(r.IntN(200)) * time.Millisecond)
		proc.kill()
		onKill(kill)
		proc = startWalcast(t, pipeline)
		all = append(all, proc)
	}
	return proc, all
}

// reconnect replaces the test's connection to the target, after the
// target was stopped or restarted.
func (tg *pgTarget) reconnect(t *testing.T) {
	t.Helper()
	tg.db.Close(context.Background())
	tg.db = connect(t, tg.dsn)
}

func clusterCtl(t *testing.T, what string, f func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := f(ctx); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestPostgresSinkTargetFaults: the target down when walcast starts
// (walcast runs, deliveries retry, the rows arrive once it is up), crashed
// and restarted mid-stream (nothing lost, nothing applied twice), and a
// row the target refuses as too long for its column (that event alone is
// parked with the server's message, the rest flows; after the column is
// widened, walcast replay applies it). The target ends equal to the
// source and the audit shows each change applied once.
func TestPostgresSinkTargetFaults(t *testing.T) {
	name := "pgfault"
	dsn, db := newSource(t, pgItems)
	truthSlot(t, dsn, db, "truth_"+name)
	tg := newTarget(t)
	tg.copySchema(t, dsn, "public.items")
	exec1(t, tg.db, `ALTER TABLE items ALTER pad TYPE varchar(45)`)
	sinks := pgSinks(tg.dsn, "    max_attempts = 1000\n")[:1]
	pipeline := writePipeline(t, name, dsn, []string{"public.items"}, sinks...)
	insert := func(from, n int, pad string) {
		exec1(t, db, `INSERT INTO items (id, v, pad) SELECT g, 0, $3 FROM generate_series($1::int, $2::int) g`, from, from+n-1, pad)
	}
	sameSoon := func(what string) {
		t.Helper()
		end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
		waitFor(t, what, 2*time.Minute, func() bool { return confirmedFlush(t, db, "walcast_"+name) >= end })
		checkSameRows(t, dsn, tg, "public.items")
	}

	// Down at start.
	clusterCtl(t, "stop the target", func(ctx context.Context) error { return tg.c.Stop(ctx, "fast") })
	proc := startCapturing(t, db, pipeline)
	proc.waitLog(t, "target database unreachable at start")
	insert(1, 100, "a")
	proc.waitLog(t, "cannot be reached")
	clusterCtl(t, "start the target", tg.c.Start)
	tg.reconnect(t)
	sameSoon("rows written before the target came up")

	// Crashed and restarted mid-stream.
	done := make(chan struct{})
	go func() {
		defer close(done)
		wdb := connect(t, dsn)
		for i := range 300 {
			if _, err := wdb.Exec(context.Background(), `UPDATE items SET v = v + 1 WHERE id = $1`, 1+i%100); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	waitFor(t, "updates to flow", time.Minute, func() bool { return queryInt(t, tg.db, `SELECT count(*) FROM applied WHERE op = 'U'`) > 20 })
	clusterCtl(t, "crash and restart the target", func(ctx context.Context) error { return tg.c.Restart(ctx, "immediate") })
	<-done
	tg.reconnect(t)
	sameSoon("updates across the target's restart")

	// A row too long for the target's column.
	insert(101, 1, strings.Repeat("y", 50))
	insert(102, 5, "b")
	waitFor(t, "the long row to be parked", time.Minute, func() bool { return parkedCount(db, name) == 1 })
	errs := parkedErrors(t, db, name)["mirror"]
	if len(errs) != 1 || !strings.Contains(errs[0], "value too long for type character varying(45)") || !strings.Contains(errs[0], "refused the row") {
		t.Fatalf("parked: %q, want the target's refusal of the row", errs)
	}
	waitFor(t, "the rows after it", time.Minute, func() bool { return queryInt(t, tg.db, `SELECT count(*) FROM items WHERE id > 101`) == 5 })
	exec1(t, tg.db, `ALTER TABLE items ALTER pad TYPE text`)
	if out, errOut, code := walcastCmd(t, "replay", pipeline, "--sink", "mirror", "--all"); code != 0 {
		t.Fatalf("walcast replay exited %d:\n%s%s", code, out, errOut)
	}
	waitFor(t, "the replayed row", time.Minute, func() bool { return parkedCount(db, name) == 0 })
	sameSoon("the replayed row")
	checkAppliedOnce(t, tg, itemTruth(t, db, "truth_"+name))
	proc.stop()
}

// TestPostgresSinkAuthRefused: a target that refuses the sink's password
// stops walcast at start with the cause and the user named, before
// anything streams.
func TestPostgresSinkAuthRefused(t *testing.T) {
	dsn, db := newSource(t, pgItems)
	tg := newTarget(t)
	exec1(t, tg.db, `CREATE ROLE sink_writer LOGIN PASSWORD 'right'`)
	hba := filepath.Join(tg.c.Data, "pg_hba.conf")
	old, err := os.ReadFile(hba)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(hba, append([]byte("host all sink_writer 127.0.0.1/32 scram-sha-256\n"), old...), 0o600); err != nil {
		t.Fatal(err)
	}
	exec1(t, tg.db, `SELECT pg_reload_conf()`)
	target := strings.Replace(tg.dsn, "postgres://postgres@", "postgres://sink_writer@", 1)
	if target == tg.dsn {
		t.Fatalf("cannot set the user in %s", tg.dsn)
	}
	pipeline := writePipeline(t, "pgauth", dsn, []string{"public.items"}, sinkSpec{ID: "mirror", SinkType: "postgres",
		Config: fmt.Sprintf("    dsn = %q\n    password = \"wrong\"\n", target)})
	proc := startWalcast(t, pipeline)
	proc.waitExit1(t, time.Minute, "the target refused the password")
	wantAll(t, proc.logText(), `refused user "sink_writer"`, "password authentication failed")
	if n := slotCount(t, db, "walcast_pgauth"); n != 0 {
		t.Errorf("the refused start left %d slots", n)
	}
}

// TestPostgresRabbitMQValidate: walcast validate checks both sinks'
// config blocks with their plugins, pointing at the attribute
// (FILE:LINE:COL) with what is wrong, without contacting any server.
func TestPostgresRabbitMQValidate(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bad.hcl")
	src := `pipeline = "v"
source "postgres" {
  dsn    = "postgres://walcast@db/shop"
  tables = ["public.orders", "public.items"]
}
sink "postgres" "mirror" {
  config {
    dsn    = "postgres://walcast@db2/shop"
    tables = { "public.orders" = "public.items" }
    mode   = "audit"
  }
}
sink "rabbitmq" "events" {
  config {
    url         = "amqp://walcast@rabbit/"
    routing_key = "{schema}.{tabel}"
  }
}
`
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := walcastCmd(t, "validate", file, "--plugin-dir", binDir)
	out := stdout + stderr
	if code == 0 {
		t.Fatalf("walcast validate accepted:\n%s", out)
	}
	wantAll(t, out,
		`bad.hcl:10:14: error: Invalid config for sink "mirror": mode: "audit": want "mirror" or "history"`,
		`tables public.orders and public.items would both be mirrored into public.items`,
		`bad.hcl:16:19: error: Invalid config for sink "events": routing_key: "{schema}.{tabel}": unknown placeholder {tabel}`)
}
