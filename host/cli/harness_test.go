package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/delivery/isolate"
	"github.com/walcast/walcast/pluginkit"
)

// ---- webhook receiver --------------------------------------------------

// received is one event as it arrived at a receiver.
type received struct {
	ID    pluginkit.EventID
	Xid   uint32
	Table string
	Op    string
	Key   string // compact JSON
	Raw   []byte
}

type receiverMode int32

const (
	modeOK   receiverMode = iota
	modeFail              // answer 500
	modeHang              // hold the request until the mode changes or the client gives up
)

// receiver is a real HTTP webhook endpoint on 127.0.0.1 that records every
// event of every successful request, in arrival order.
type receiver struct {
	t    testing.TB
	URL  string
	srv  *http.Server
	mu   sync.Mutex
	got  []received
	mode receiverMode
	wake chan struct{} // closed and replaced when the mode changes
	reqs int
	// delay, when set, is slept before answering 200 (a slow sink).
	delay time.Duration
	// respond, when set, decides each request's answer from its events
	// (0 means 200); a non-200 answer records nothing.
	respond func(h http.Header, body []byte, evs []received) (status int, header http.Header)
	// arrivals holds the time each event arrived (parallel to got).
	arrivals []time.Time
	// inFlight counts requests being handled per row; overlap records a
	// row that was in two requests at once.
	inFlight map[string]int
	overlap  []string
	// ids and ops count distinct ids and events by op as they arrive, so
	// that tests polling them do not hold mu for work proportional to
	// everything received (under the race detector that starved the
	// handlers and made the sink look slow).
	ids map[pluginkit.EventID]struct{}
	ops map[string]int
}

func newReceiver(t testing.TB) *receiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{t: t, URL: "http://" + l.Addr().String() + "/hooks", wake: make(chan struct{})}
	r.srv = &http.Server{Handler: r}
	go r.srv.Serve(l)
	t.Cleanup(func() {
		r.setMode(modeOK)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r.srv.Shutdown(ctx)
	})
	return r
}

func (r *receiver) setMode(m receiverMode) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mode = m
	close(r.wake)
	r.wake = make(chan struct{})
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for {
		r.mu.Lock()
		r.reqs++
		mode, wake, delay := r.mode, r.wake, r.delay
		r.mu.Unlock()
		switch mode {
		case modeFail:
			http.Error(w, "receiver told to fail", http.StatusInternalServerError)
			return
		case modeHang:
			select {
			case <-wake:
				continue
			case <-req.Context().Done():
				return
			}
		}
		if delay > 0 {
			time.Sleep(delay)
		}
		break
	}
	var batch struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(body, &batch); err != nil {
		r.t.Errorf("receiver: bad body: %v: %.200s", err, body)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	evs := make([]received, 0, len(batch.Events))
	for _, raw := range batch.Events {
		var e struct {
			ID    string          `json:"id"`
			Xid   uint32          `json:"xid"`
			Table string          `json:"table"`
			Op    string          `json:"op"`
			Key   json.RawMessage `json:"key"`
		}
		if err := json.Unmarshal(raw, &e); err != nil {
			r.t.Errorf("receiver: bad event: %v", err)
			continue
		}
		id, err := pluginkit.ParseEventID(e.ID)
		if err != nil {
			r.t.Errorf("receiver: %v", err)
			continue
		}
		var key bytes.Buffer
		json.Compact(&key, e.Key)
		evs = append(evs, received{ID: id, Xid: e.Xid, Table: e.Table, Op: e.Op, Key: key.String(), Raw: raw})
	}
	r.mu.Lock()
	respond := r.respond
	if r.inFlight == nil {
		r.inFlight = map[string]int{}
	}
	rows := map[string]bool{}
	for _, e := range evs {
		k := e.Table + e.Key
		if !rows[k] {
			rows[k] = true
			if r.inFlight[k]++; r.inFlight[k] > 1 {
				r.overlap = append(r.overlap, k)
			}
		}
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		for k := range rows {
			r.inFlight[k]--
		}
		r.mu.Unlock()
	}()
	if respond != nil {
		if status, hdr := respond(req.Header, body, evs); status != 0 && status != http.StatusOK {
			for k, v := range hdr {
				w.Header()[k] = v
			}
			w.WriteHeader(status)
			return
		}
	}
	r.mu.Lock()
	now := time.Now()
	r.got = append(r.got, evs...)
	if r.ids == nil {
		r.ids, r.ops = map[pluginkit.EventID]struct{}{}, map[string]int{}
	}
	for _, e := range evs {
		r.ids[e.ID] = struct{}{}
		r.ops[e.Op]++
	}
	for range evs {
		r.arrivals = append(r.arrivals, now)
	}
	r.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (r *receiver) setRespond(f func(h http.Header, body []byte, evs []received) (int, http.Header)) {
	r.mu.Lock()
	r.respond = f
	r.mu.Unlock()
}

func (r *receiver) arrivalTimes() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.arrivals...)
}

func (r *receiver) overlaps() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.overlap...)
}

func (r *receiver) events() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// distinct is how many different ids arrived.
func (r *receiver) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ids)
}

// countOp is how many events of op arrived (redeliveries included).
func (r *receiver) countOp(op string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ops[op]
}

// ---- walcast process ---------------------------------------------------

type walcastProc struct {
	t    testing.TB
	cmd  *exec.Cmd
	log  string
	done chan error
}

// startWalcast runs the built binary on a pipeline file; its log goes to a
// file that is printed when the test fails.
func startWalcast(t testing.TB, pipeline string, args ...string) *walcastProc {
	t.Helper()
	return startWalcastAttr(t, nil, pipeline, args...)
}

// startWalcastAttr is startWalcast with process attributes (e.g. its own
// process group).
func startWalcastAttr(t testing.TB, attr *syscall.SysProcAttr, pipeline string, args ...string) *walcastProc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "walcast.log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, "walcast"), append([]string{"run", pipeline, "--plugin-dir", binDir, "--shutdown-timeout", "10s"}, args...)...)
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &walcastProc{t: t, cmd: cmd, log: logPath, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); f.Close() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("walcast log (%s):\n%s", logPath, tail(string(b), 60))
		}
	})
	return p
}

// kill SIGKILLs walcast: no shutdown, no final checkpoint, no final
// confirmation.
func (p *walcastProc) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p.done <- nil // keep Cleanup from blocking
}

// stop sends SIGTERM and expects a clean exit.
func (p *walcastProc) stop() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			b, _ := os.ReadFile(p.log)
			p.t.Fatalf("walcast exited with %v after SIGTERM; log:\n%s", err, tail(string(b), 40))
		}
	case <-time.After(60 * time.Second):
		p.t.Fatal("walcast did not exit within 60s of SIGTERM")
	}
}

// waitExit1 waits up to within for walcast to exit with status 1, the way
// it stops on an error it cannot go on from; after says what should have
// stopped it, for the failure message.
func (p *walcastProc) waitExit1(t testing.TB, within time.Duration, after string) {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("walcast exited with %v after %s, want exit status 1", err, after)
		}
	case <-time.After(within):
		t.Fatalf("walcast still runs %s after %s", within, after)
	}
}

// waitLog waits for a line containing substr in walcast's log.
func (p *walcastProc) waitLog(t testing.TB, substr string) {
	t.Helper()
	waitFor(t, "walcast to log "+strconv.Quote(substr), time.Minute, func() bool { return strings.Contains(p.logText(), substr) })
}

func (p *walcastProc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// childPIDs lists the direct children of pid (the sink plugin processes).
func childPIDs(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may contain spaces.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, n)
		}
	}
	return out
}

// ---- pipelines and databases -------------------------------------------

type sinkSpec struct {
	ID, URL  string
	Batch    int
	Extra    string // more lines for the delivery block
	Durable  *bool
	SinkType string
	Config   string // overrides the config block body
}

func writePipeline(t testing.TB, name, dsn string, tables []string, sinks ...sinkSpec) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "pipeline = %q\n\nsource \"postgres\" {\n  dsn = %q\n  tables = [", name, dsn)
	for i, tb := range tables {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q", tb)
	}
	b.WriteString("]\n}\n")
	for _, s := range sinks {
		typ := s.SinkType
		if typ == "" {
			typ = "webhook"
		}
		batch := s.Batch
		if batch == 0 {
			batch = 100
		}
		fmt.Fprintf(&b, "\nsink %q %q {\n", typ, s.ID)
		if s.Durable != nil {
			fmt.Fprintf(&b, "  durable = %v\n", *s.Durable)
		}
		retry := "    retry_base = \"100ms\"\n"
		if strings.Contains(s.Extra, "retry_base") {
			retry = ""
		}
		fmt.Fprintf(&b, "  delivery {\n    batch_size = %d\n%s%s  }\n", batch, retry, s.Extra)
		cfg := s.Config
		if cfg == "" {
			cfg = fmt.Sprintf("    url = %q\n    timeout = \"5s\"\n", s.URL)
		}
		fmt.Fprintf(&b, "  config {\n%s  }\n}\n", cfg)
	}
	path := filepath.Join(t.TempDir(), name+".hcl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// Slots are cluster-wide: drop this pipeline's slot when the test ends
	// (after walcast is stopped; cleanups run in reverse), so that the same
	// test can run again (-count) against the shared cluster.
	t.Cleanup(func() {
		dropSlot(dsn, "walcast_"+name)
		// A sink detached to catch up has a slot of its own.
		for _, s := range sinks {
			dropSlot(dsn, isolate.SlotName("walcast_"+name, s.ID))
		}
	})
	return path
}

// dropSlot drops a replication slot, waiting a little for its walsender to
// notice that walcast is gone. Errors are ignored: the slot may never have
// been created, or its cluster may be gone.
func dropSlot(dsn, slot string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return
	}
	defer conn.Close(context.Background())
	for ctx.Err() == nil {
		_, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		if err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func exec1(t testing.TB, db *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := db.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func lsnQuery(t testing.TB, db *pgx.Conn, sql string, args ...any) uint64 {
	t.Helper()
	var s *string
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if s == nil {
		return 0
	}
	v, err := pluginkit.ParseLSN(*s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func confirmedFlush(t testing.TB, db *pgx.Conn, slot string) uint64 {
	return lsnQuery(t, db, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot)
}

func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// ---- ground truth ------------------------------------------------------

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
// walcast, so it is the reference for "every committed change".
func truthSlot(t testing.TB, db *pgx.Conn, slot string) {
	t.Helper()
	exec1(t, db, `SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, slot)
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
	first := map[pluginkit.EventID]received{}
	idOf := map[txIdx]pluginkit.EventID{}
	var order []received
	for _, r := range got {
		k := txIdx{r.Xid, r.ID.Index}
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

// scanLines is a small helper for reading logs.
func countLines(s, substr string) int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			n++
		}
	}
	return n
}

// waitSlot waits until walcast has created its slot: changes committed
// before that are not captured, by design.
// waitSlotReleased waits until no walsender holds slot (or it is gone):
// the walsender lets go a moment after walcast exits, and dropping or
// advancing the slot before then fails with "is active for PID".
func waitSlotReleased(t testing.TB, db *pgx.Conn, slot string) {
	t.Helper()
	waitFor(t, "slot "+slot+" released", time.Minute, func() bool {
		var active bool
		err := db.QueryRow(context.Background(), `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
		return err != nil || !active
	})
}

func waitSlot(t testing.TB, db *pgx.Conn, slot string) {
	t.Helper()
	waitFor(t, "slot "+slot, 60*time.Second, func() bool {
		var n int
		db.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&n)
		return n == 1
	})
}
