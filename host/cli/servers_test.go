package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/pluginkit"
)

// Destination servers the nats and redis sinks' tests start (Debian's
// nats-server and redis-server, installed by `make tools`), a workload
// with key changes and TRUNCATEs, its truth, a mirror that applies key
// changes, and the crash loop those sinks share.

// serverProc is a server process the test starts, kills and starts again
// with the same arguments (its data directory survives).
type serverProc struct {
	t    testing.TB
	what string
	bin  string
	args []string
	addr string // where it listens, 127.0.0.1:port
	p    *process
}

// needServer returns the path of a server binary `make tools` installs.
// In CI a missing one fails the test; by hand, without root to install
// it, the test is skipped with what to run.
func needServer(t testing.TB, bin, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(bin)
	if err == nil {
		return path
	}
	msg := fmt.Sprintf("%s not found: run `make tools` (apt-get install -y %s)", bin, pkg)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// start runs the server and waits until its port accepts connections.
func (s *serverProc) start() {
	s.t.Helper()
	s.p = startLogged(s.t, exec.Command(s.bin, s.args...), s.what)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-s.p.exited:
			s.t.Fatalf("%s exited at start: %v\n%s", s.what, s.p.err, tail(s.p.logText(), 30))
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s did not listen on %s within 30s:\n%s", s.what, s.addr, tail(s.p.logText(), 30))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the server with sig (SIGKILL: a crash; SIGTERM: a clean
// shutdown) and waits for it.
func (s *serverProc) stop(sig syscall.Signal) {
	s.p.cmd.Process.Signal(sig)
	select {
	case <-s.p.exited:
	case <-time.After(30 * time.Second):
		s.t.Fatalf("%s did not exit within 30s of %v", s.what, sig)
	}
}

// startRedisServer starts redis-server on a free port with its data in a
// temporary directory, appendonly with fsync always (a SIGKILL then loses
// nothing it acknowledged), plus extra directives ("--requirepass", "x").
func startRedisServer(t testing.TB, extra ...string) *serverProc {
	t.Helper()
	s := &serverProc{t: t, what: "redis-server", bin: needServer(t, "redis-server", "redis-server"), addr: freeAddr(t)}
	_, port, _ := net.SplitHostPort(s.addr)
	s.args = append([]string{"--port", port, "--bind", "127.0.0.1", "--dir", t.TempDir(), "--save", "",
		"--appendonly", "yes", "--appendfsync", "always", "--protected-mode", "no"}, extra...)
	s.start()
	return s
}

// redisCLI runs Debian's redis-cli, the independent client, against s and
// returns its output.
func redisCLI(t testing.TB, s *serverProc, args ...string) []byte {
	t.Helper()
	cli := needServer(t, "redis-cli", "redis-tools")
	host, port, _ := net.SplitHostPort(s.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, append([]string{"-h", host, "-p", port}, args...)...)
	cmd.Env = append(os.Environ(), "REDISCLI_AUTH=") // never a password from the environment
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("redis-cli %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// startNATSServer starts nats-server with JetStream on a free port, its
// store in a temporary directory; extra goes into its configuration file.
func startNATSServer(t testing.TB, extra string) *serverProc {
	t.Helper()
	s := &serverProc{t: t, what: "nats-server", bin: needServer(t, "nats-server", "nats-server"), addr: freeAddr(t)}
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	body := fmt.Sprintf("listen: %q\njetstream { store_dir: %q }\n%s\n", s.addr, filepath.Join(dir, "js"), extra)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	s.args = []string{"-c", conf}
	s.start()
	return s
}

// ---- a workload with key changes and truncates ---------------------------

// keyedWorkload commits at least n changes to items (id int PRIMARY KEY,
// v int, pad text) in transactions of 1 to 1,000 rows: inserts of new
// rows, updates, updates that change the key (moving rows to fresh ids),
// deletes, and now and then a TRUNCATE.
func keyedWorkload(ctx context.Context, db *pgx.Conn, r *rand.Rand, n int) (int, error) {
	return keyedWorkloadUntil(ctx, db, r, n, n, nil)
}

// keyedWorkloadUntil is keyedWorkload that, past n changes, goes on while
// more(changes so far) says so (it may wait first, to pace the writer),
// up to limit changes.
func keyedWorkloadUntil(ctx context.Context, db *pgx.Conn, r *rand.Rand, n, limit int, more func(written int) bool) (int, error) {
	sizes := []int{1, 1, 2, 5, 10, 50, 200, 1000}
	next, moved, changes := 1, 0, 0
	for changes < n || (more != nil && changes < limit && more(changes)) {
		size := sizes[r.IntN(len(sizes))]
		lo := 1 + r.IntN(max(1, next-size))
		var sql string
		switch op := r.IntN(40); {
		case next < 2*size || op < 16:
			sql = fmt.Sprintf(`INSERT INTO items (id, v, pad) SELECT g, 0, repeat('x', 50) FROM generate_series(%d, %d) g`, next, next+size-1)
			next += size
		case op < 26:
			sql = fmt.Sprintf(`UPDATE items SET v = v + 1 WHERE id BETWEEN %d AND %d`, lo, lo+size-1)
		case op < 32:
			// A key change: rows move to ids no insert ever uses.
			moved++
			sql = fmt.Sprintf(`UPDATE items SET id = id + %d, v = v + 1 WHERE id BETWEEN %d AND %d`, moved*10_000_000, lo, lo+size-1)
		case op < 39:
			sql = fmt.Sprintf(`DELETE FROM items WHERE id BETWEEN %d AND %d`, lo, lo+size-1)
		default:
			sql = `TRUNCATE items`
		}
		tag, err := db.Exec(ctx, sql)
		if err != nil {
			return changes, fmt.Errorf("%s: %w", sql, err)
		}
		// As test_decoding counts: a row per change, one per TRUNCATE,
		// nothing for an update or delete that matched no row.
		if sql == `TRUNCATE items` {
			changes++
		} else {
			changes += int(tag.RowsAffected())
		}
	}
	return changes, nil
}

var tdKeyChange = regexp.MustCompile(`^table ([^ ]+): UPDATE: old-key: id\[[a-z]+\]:-?\d+ new-tuple: id\[[a-z]+\]:(-?\d+)`)

// truthKeyed is truth for a workload with key changes: test_decoding
// writes an update that changed the key as "old-key: … new-tuple: …",
// and the event's key is the new one.
func truthKeyed(t testing.TB, db *pgx.Conn, slot string, tables map[string]bool) []change {
	t.Helper()
	out := truth(t, db, slot, tables)
	rows, err := db.Query(context.Background(),
		`SELECT data FROM pg_logical_slot_peek_changes($1, NULL, NULL, 'include-xids', '1', 'skip-empty-xacts', '1')`, slot)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	// truth counted the same lines in the same order: walk both.
	i, keyChanges, truncates := 0, 0, 0
	for _, line := range lines {
		if tdBegin.MatchString(line) || !strings.HasPrefix(line, "table ") {
			continue
		}
		if m := tdTruncate.FindStringSubmatch(line); m != nil {
			for _, tb := range strings.Split(m[1], ", ") {
				if tables[tb] {
					i++
					truncates++
				}
			}
			continue
		}
		m := tdChange.FindStringSubmatch(line)
		if m == nil || !tables[m[1]] {
			continue
		}
		if k := tdKeyChange.FindStringSubmatch(line); k != nil {
			out[i].Key = `{"id":` + k[2] + `}`
			keyChanges++
		}
		i++
	}
	if i != len(out) {
		t.Fatalf("truthKeyed walked %d changes, truth has %d", i, len(out))
	}
	t.Logf("truth: %d committed changes, %d of them key changes and %d truncates", len(out), keyChanges, truncates)
	return out
}

// applyKeyed applies events in the order a consumer read them, skipping
// ids it already applied, to an in-memory items (id → v): an update that
// changed the key removes the old row ("old" holds the old key).
func applyKeyed(t testing.TB, evs []received) map[int]int {
	t.Helper()
	rows := map[int]int{}
	seen := map[pluginkit.EventID]bool{}
	for _, e := range evs {
		if seen[e.ID] {
			continue
		}
		seen[e.ID] = true
		var ev struct {
			New *struct{ ID, V int } `json:"new"`
			Old *struct{ ID int }    `json:"old"`
			Key *struct{ ID int }    `json:"key"`
		}
		if err := json.Unmarshal(e.Raw, &ev); err != nil {
			t.Fatalf("event %s: %v", e.ID, err)
		}
		switch e.Op {
		case "insert", "update", "read":
			if ev.Old != nil && ev.Old.ID != ev.New.ID {
				delete(rows, ev.Old.ID)
			}
			rows[ev.New.ID] = ev.New.V
		case "delete":
			delete(rows, ev.Key.ID)
		case "truncate":
			clear(rows)
		default:
			t.Fatalf("event %s: op %s", e.ID, e.Op)
		}
	}
	return rows
}

// checkKeyedMirror compares applyKeyed's rows with the items table.
func checkKeyedMirror(t testing.TB, db *pgx.Conn, evs []received) {
	t.Helper()
	want, got := tableRows(t, db, "items"), applyKeyed(t, evs)
	diff := 0
	for id, v := range want {
		if g, ok := got[id]; !ok || g != v {
			if diff < 5 {
				t.Errorf("row %d: table has v=%d, the mirror %v", id, v, g)
			}
			diff++
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			if diff < 5 {
				t.Errorf("row %d: the mirror has it, the table does not", id)
			}
			diff++
		}
	}
	if diff > 0 {
		t.Fatalf("the mirror of what the consumer read differs from items in %d rows (%d in the table)", diff, len(want))
	}
	t.Logf("items: %d rows, equal to the mirror of what the consumer read", len(want))
}

// ---- the crash loop -------------------------------------------------------

// sinkLoop is one crash loop against a sink whose destination the test can
// count.
type sinkLoop struct {
	name  string // the pipeline's name
	sink  sinkSpec
	kills int
	// progress counts what the destination holds (entries, messages).
	progress func() int
	// afterKill, when set, runs after kill k's walcast was started again;
	// what it returns is added to that kill's log line.
	afterKill func(k int, p *walcastProc, hostCheckpoint string) string
}

// sinkLoopResult is what a crash loop leaves for the checks.
type sinkLoopResult struct {
	db   *pgx.Conn
	want []change
	logs string // every walcast process's log
}

// runSinkCrashLoop streams a 20,000+ change keyedWorkload through the sink
// while SIGKILLing walcast lc.kills times at random points spread over
// the workload, then waits until the slot confirmed everything and stops
// walcast cleanly. The checks are the caller's.
func runSinkCrashLoop(t *testing.T, dsn string, db *pgx.Conn, lc sinkLoop) sinkLoopResult {
	ctx := context.Background()
	truthSlot(t, dsn, db, "truth_"+lc.name)
	pipeline := writePipeline(t, lc.name, dsn, []string{"public.items"}, lc.sink)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 7))
	wdb := connect(t, dsn)
	proc := startWalcast(t, pipeline)
	procs := []*walcastProc{proc}
	waitSlot(t, db, "walcast_"+lc.name)
	workDone := make(chan error, 1)
	// Past 20,000 changes the writer goes on until the last kill, keeping
	// at most 2,000 changes ahead of the destination, so that every kill
	// lands mid-stream however fast the sink drains.
	var worked, killed atomic.Bool
	more := func(written int) bool {
		for !killed.Load() {
			if written-lc.progress() < 2000 {
				return true
			}
			time.Sleep(10 * time.Millisecond)
		}
		return false
	}
	go func() {
		_, err := keyedWorkloadUntil(ctx, wdb, rand.New(rand.NewPCG(seed, 8)), 20000, 20000*max(5, lc.kills), more)
		worked.Store(true)
		workDone <- err
	}()
	begin := time.Now()
	var workEnd uint64
	for kill := 1; kill <= lc.kills; kill++ {
		target := lc.progress() + 1 + r.IntN(20000/(lc.kills+1))
		drained := false
		waitFor(t, "events before kill", 2*time.Minute, func() bool {
			if worked.Load() && workEnd == 0 {
				workEnd = lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
			}
			drained = workEnd != 0 && confirmedFlush(t, db, "walcast_"+lc.name) >= workEnd
			return lc.progress() >= target || drained
		})
		if drained {
			t.Fatalf("the workload was delivered whole after %d of %d kills; every kill must land mid-stream", kill-1, lc.kills)
		}
		if r.IntN(2) == 0 {
			time.Sleep(time.Duration(r.IntN(300)) * time.Millisecond) // sometimes after a checkpoint write
		}
		proc.kill()
		var host string
		db.QueryRow(ctx, `SELECT coalesce(max(event_id), '') FROM walcast.checkpoints WHERE pipeline = $1`, lc.name).Scan(&host)
		line := fmt.Sprintf("kill %d (%s): walcast SIGKILLed at %d events written; walcast.checkpoints %q", kill, time.Since(begin).Round(time.Millisecond), lc.progress(), host)
		proc = startWalcast(t, pipeline)
		procs = append(procs, proc)
		if lc.afterKill != nil {
			line += lc.afterKill(kill, proc, host)
		}
		t.Log(line)
	}
	killed.Store(true)
	if err := <-workDone; err != nil {
		t.Fatal(err)
	}
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	res := sinkLoopResult{db: db, want: truthKeyed(t, db, "truth_"+lc.name, map[string]bool{"public.items": true})}
	if len(res.want) < 20000 {
		t.Fatalf("workload committed only %d changes", len(res.want))
	}
	waitFor(t, fmt.Sprintf("slot to confirm all %d changes", len(res.want)), 3*time.Minute, func() bool {
		return confirmedFlush(t, db, "walcast_"+lc.name) >= end
	})
	proc.stop()
	for _, p := range procs {
		res.logs += p.logText()
	}
	return res
}

// loggedCheckpoint finds the checkpoint a sink's connect line reports
// (re is `msg="<sink> connected".* checkpoint=(\S+)`) in the log of a
// freshly started walcast, waiting for the line.
func loggedCheckpoint(t testing.TB, p *walcastProc, msg string, re *regexp.Regexp) pluginkit.EventID {
	t.Helper()
	p.waitLog(t, msg)
	m := re.FindStringSubmatch(p.logText())
	if m == nil {
		t.Fatalf("no checkpoint in the sink's connect line:\n%s", tail(p.logText(), 20))
	}
	id, err := pluginkit.ParseEventID(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// sumLogged sums the numbers re's first group finds in logs.
func sumLogged(logs string, re *regexp.Regexp) int {
	n := 0
	for _, m := range re.FindAllStringSubmatch(logs, -1) {
		d, _ := strconv.Atoi(m[1])
		n += d
	}
	return n
}

// idOrZero parses an event id; empty or invalid gives the zero id.
func idOrZero(s string) pluginkit.EventID {
	id, _ := pluginkit.ParseEventID(s)
	return id
}

// ---- broken servers ---------------------------------------------------------

// downAtStart runs a pipeline whose sink's server is down when walcast
// starts: walcast must keep running (logging warn), take rows committed
// meanwhile, and deliver them once start brings the server up. It
// returns the rows' truth.
func downAtStart(t *testing.T, name string, sink sinkSpec, warn string, start func(), count func() int) []change {
	t.Helper()
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	truthSlot(t, dsn, db, "truth_"+name)
	// The server may stay down longer than the default five attempts.
	sink.Extra += "    max_attempts = 1000\n"
	pipeline := writePipeline(t, name, dsn, []string{"public.items"}, sink)
	proc := startCapturing(t, db, pipeline)
	proc.waitLog(t, warn)
	exec1(t, db, `INSERT INTO items SELECT g, g, 'x' FROM generate_series(1, 5) g`)
	exec1(t, db, `UPDATE items SET id = 10 WHERE id = 5`)
	exec1(t, db, `TRUNCATE items`)
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	time.Sleep(500 * time.Millisecond) // a few failed attempts first (a pause, not a wait for an event)
	start()
	waitFor(t, "the slot to confirm every change", time.Minute, func() bool { return confirmedFlush(t, db, "walcast_"+name) >= end })
	proc.stop()
	if n := parkedCount(db, name); n != 0 {
		t.Fatalf("%d events parked while the server was down", n)
	}
	if n := count(); n != 7 {
		t.Fatalf("the destination holds %d events, want 7", n)
	}
	return truthKeyed(t, db, "truth_"+name, map[string]bool{"public.items": true})
}

// refusedAtStart runs a pipeline whose sink's server refuses its
// credentials: walcast must exit 1 at start with what to check, and
// without the secret in its output.
func refusedAtStart(t *testing.T, name string, sink sinkSpec, secret string, want ...string) {
	t.Helper()
	dsn, _ := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	out := runOnce(t, writePipeline(t, name, dsn, []string{"public.items"}, sink))
	wantAll(t, out, want...)
	if strings.Contains(out, secret) {
		t.Errorf("walcast's output shows the credential %q:\n%s", secret, out)
	}
}

// tooLargeParked commits rows, one of them larger than the sink's server
// takes: that event is parked at once (permanent, one attempt) with an
// error naming limit, and every other change is delivered; it returns the
// truth without the parked change.
func tooLargeParked(t *testing.T, name string, sink sinkSpec, pad int, limit string) []change {
	t.Helper()
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	truthSlot(t, dsn, db, "truth_"+name)
	pipeline := writePipeline(t, name, dsn, []string{"public.items"}, sink)
	proc := startCapturing(t, db, pipeline)
	exec1(t, db, `INSERT INTO items SELECT g, g, 'x' FROM generate_series(1, 5) g`)
	exec1(t, db, fmt.Sprintf(`UPDATE items SET pad = repeat('y', %d) WHERE id = 3`, pad))
	exec1(t, db, `UPDATE items SET v = v + 1 WHERE id <> 3`)
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	waitFor(t, "the large event to be parked", time.Minute, func() bool { return parkedCount(db, name) == 1 })
	waitFor(t, "the slot to move past it", time.Minute, func() bool { return confirmedFlush(t, db, "walcast_"+name) >= end })
	proc.stop()
	errs := parkedErrors(t, db, name)[sink.ID]
	if len(errs) != 1 || !strings.Contains(errs[0], limit) || !strings.Contains(errs[0], "bytes") {
		t.Fatalf("parked errors %q, want one naming %s and the size", errs, limit)
	}
	var attempts int
	db.QueryRow(context.Background(), `SELECT attempts FROM walcast.parked WHERE pipeline = $1`, name).Scan(&attempts)
	if attempts != 1 {
		t.Errorf("the large event was tried %d times; a permanent refusal parks it at once", attempts)
	}
	var out []change
	for _, c := range truthKeyed(t, db, "truth_"+name, map[string]bool{"public.items": true}) {
		if !(c.Op == "update" && c.Key == `{"id":3}`) { // the large one: row 3's only update
			out = append(out, c)
		}
	}
	return out
}
