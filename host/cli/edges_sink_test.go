package cli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/walcast/walcast/host/pgtest"
)

// Issue 24's sink edges, end to end: a real PostgreSQL, the built walcast
// and sink plugins, real HTTP servers on 127.0.0.1 and a real full disk
// (tmpfs).

// landingServer is where a redirect points: it answers 200 to anything
// (so a followed redirect looks delivered) and records every request.
type landingServer struct {
	URL  string
	mu   sync.Mutex
	reqs []string
}

func newLandingServer(t *testing.T) *landingServer {
	t.Helper()
	s := &landingServer{}
	s.URL = serveLoopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, fmt.Sprintf("%s %s (%d bytes, Authorization %q)", r.Method, r.URL.Path, len(body), r.Header.Get("Authorization")))
		s.mu.Unlock()
	}))
	return s
}

func (s *landingServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.reqs...)
}

// TestWebhookRedirectIsParkedNotLost: a receiver that answers 302 (Go's
// client used to follow it as a GET without the body, whose 200 counted
// as delivered) and then 307 (followed with the body, the signature and
// the API key, to another server). Every event must end up parked after
// its failed attempts, with an error naming the status and the Location,
// nothing may reach the Location, and `walcast replay` then delivers every
// change: nothing lost.
func TestWebhookRedirectIsParkedNotLost(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	truthSlot(t, dsn, db, "truth_redirect")
	rcv := newReceiver(t)
	land := newLandingServer(t)
	var redirect atomic.Int32
	rcv.setRespond(func(http.Header, []byte, []received) (int, http.Header) {
		code := int(redirect.Load())
		if code == 0 {
			return 0, nil
		}
		return code, http.Header{"Location": {land.URL + "/landing?token=loc-secret"}}
	})
	pipeline := writePipeline(t, "redir", dsn, []string{"public.items"}, sinkSpec{
		ID: "hook", Batch: 20, Extra: "    max_attempts = 2\n    retry_base = \"50ms\"\n",
		Config: fmt.Sprintf("    url = %q\n    timeout = \"5s\"\n    headers = { Authorization = \"Bearer api-key-e2e\" }\n    secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\n", rcv.URL),
	})
	proc := startCapturing(t, db, pipeline)

	parked := 0
	for _, code := range []int{http.StatusFound, http.StatusTemporaryRedirect} {
		redirect.Store(int32(code))
		first := parked + 1
		exec1(t, db, `INSERT INTO items SELECT g, 0 FROM generate_series($1::int, $1::int + 99) g`, first)
		end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
		// Everything is resolved once the slot is past the insert:
		// delivered or parked.
		waitFor(t, fmt.Sprintf("the slot past the changes answered %d", code), 2*time.Minute,
			func() bool { return confirmedFlush(t, db, "walcast_redir") >= end })
		parked += 100
		if n := parkedCount(db, "redir"); n != parked {
			t.Fatalf("answered %d: %d events parked, want %d; %d reached the receiver, and the Location got %d requests: %.300q",
				code, n, parked, rcv.count(), len(land.requests()), land.requests())
		}
	}
	if got := land.requests(); len(got) > 0 {
		t.Fatalf("the redirects were followed: the Location got %d requests: %.300q", len(got), got)
	}
	want := map[int]bool{}
	for _, msg := range parkedErrors(t, db, "redir")["hook"] {
		switch {
		case strings.Contains(msg, "302 Found with Location "+land.URL):
			want[302] = true
		case strings.Contains(msg, "307 Temporary Redirect with Location "+land.URL):
			want[307] = true
		default:
			t.Fatalf("parked with last_error %q; want it to name the redirect status and Location %s", msg, land.URL)
		}
		if strings.Contains(msg, "loc-secret") {
			t.Fatalf("last_error shows the Location's query: %q", msg)
		}
	}
	if !want[302] || !want[307] {
		t.Fatalf("the parked errors name %v, want both 302 and 307", want)
	}
	out, err := walcastCLI(t, "parked", pipeline, "--sink", "hook")
	if err != nil || !strings.Contains(out, "200 parked events") || !strings.Contains(out, "Location "+land.URL) {
		t.Fatalf("walcast parked: %v\n%s", err, out)
	}

	redirect.Store(0)
	out, err = walcastCLI(t, "replay", pipeline, "--sink", "hook", "--all")
	if err != nil {
		t.Fatalf("walcast replay: %v\n%s", err, out)
	}
	waitFor(t, "the 200 replayed changes", 2*time.Minute, func() bool { return rcv.distinct() == 200 })
	proc.stop()
	verify(t, truth(t, db, "truth_redirect", map[string]bool{"public.items": true}), rcv.events())
	if got := land.requests(); len(got) > 0 {
		t.Fatalf("the Location got requests: %q", got)
	}
}

// urlSecrets are the parts of a hook URL that hold credentials, as
// written in secretHookURL.
var urlSecrets = []string{"hookuser", "hookpass", "T0SECRET", "B0SECRET", "pathtoken", "querytoken"}

// secretHookURL puts a credential in every part of base's URL
// (http://host:port): user:password, a Slack-style path and a query.
func secretHookURL(base string) string {
	return strings.Replace(base, "http://", "http://hookuser:hookpass@", 1) + "/services/T0SECRET/B0SECRET/pathtoken?token=querytoken"
}

// assertNoURLSecret reports, once, every part of urlSecrets text shows.
func assertNoURLSecret(t *testing.T, what, text string) bool {
	t.Helper()
	var shown []string
	first := -1
	for _, s := range urlSecrets {
		if i := strings.Index(text, s); i >= 0 {
			shown = append(shown, s)
			if first < 0 || i < first {
				first = i
			}
		}
	}
	if len(shown) > 0 {
		t.Errorf("%s shows %q: ...%s...", what, shown, text[max(first-80, 0):min(first+120, len(text))])
	}
	return len(shown) == 0
}

// TestWebhookURLSecretsNeverShown: two webhook sinks whose URLs carry a
// credential in the user:password, the path and the query fail (one
// receiver answers 500, the other is not listening), and their events are
// parked. Neither walcast's log, nor walcast.parked.last_error, nor
// `walcast parked`, `walcast status` or the console shows any of it; the
// errors show scheme and host. A URL that does not parse is rejected by `walcast
// validate` without repeating it either.
func TestWebhookURLSecretsNeverShown(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	failing := newReceiver(t)
	failing.setMode(modeFail)
	failingBase := strings.TrimSuffix(failing.URL, "/hooks")
	downBase := "http://" + freeAddr(t) // nothing listens there: connection refused, a *url.Error

	extra := "    max_attempts = 2\n    retry_base = \"50ms\"\n"
	pipeline := writePipeline(t, "secrets", dsn, []string{"public.items"},
		sinkSpec{ID: "failing", URL: secretHookURL(failingBase), Extra: extra},
		sinkSpec{ID: "down", URL: secretHookURL(downBase), Extra: extra},
	)
	proc := startCapturing(t, db, pipeline)
	exec1(t, db, `INSERT INTO items SELECT g, 0 FROM generate_series(1, 5) g`)
	waitFor(t, "both sinks' 5 events parked", 2*time.Minute, func() bool { return parkedCount(db, "secrets") == 10 })

	errs := parkedErrors(t, db, "secrets")
	for sink, base := range map[string]string{"failing": failingBase, "down": downBase} {
		if len(errs[sink]) != 5 || !strings.Contains(errs[sink][0], base) {
			t.Errorf("sink %s: parked errors %q, want 5 naming %s", sink, errs[sink], base)
		}
		for _, msg := range errs[sink] {
			if !assertNoURLSecret(t, "walcast.parked.last_error of "+sink, msg) {
				break
			}
		}
	}
	out, err := walcastCLI(t, "parked", pipeline)
	if err != nil || !strings.Contains(out, failingBase) || !strings.Contains(out, downBase) {
		t.Errorf("walcast parked: %v, want it to name %s and %s:\n%s", err, failingBase, downBase, out)
	}
	assertNoURLSecret(t, "walcast parked", out)
	out, err = walcastCLI(t, "status", pipeline)
	if err != nil {
		t.Errorf("walcast status: %v\n%s", err, out)
	}
	assertNoURLSecret(t, "walcast status", out)
	console := startConsole(t, nil, pipeline, "--plugin-dir", binDir)
	resp, err := http.Get(console)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), "500 Internal Server Error") {
		t.Errorf("the console page does not show the sink's error:\n%.2000s", page)
	}
	assertNoURLSecret(t, "the console page", string(page))

	proc.stop()
	log := proc.logText()
	if !strings.Contains(log, "delivery failed") || !strings.Contains(log, "connection refused") {
		t.Errorf("walcast's log does not report the failures:\n%s", tail(log, 30))
	}
	assertNoURLSecret(t, "walcast's log", log)

	// A URL that does not parse: url.Parse's error repeats it whole.
	badURL := strings.Replace(secretHookURL(failingBase), "/pathtoken", "/pathtoken%zz", 1)
	bad := writePipeline(t, "badurl", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: badURL})
	out, err = walcastCLI(t, "validate", bad, "--plugin-dir", binDir)
	if err == nil || !strings.Contains(out, "invalid URL escape") {
		t.Fatalf("walcast validate of an unparseable url: %v\n%s", err, out)
	}
	assertNoURLSecret(t, "walcast validate", out)
}

// mountSmallTmpfs mounts a tmpfs of size bytes on a temporary directory,
// so that a test can fill a real file system. Without root (or
// CAP_SYS_ADMIN) it skips, saying why; plugins/stdout's injected-fault
// tests cover the sink's logic everywhere.
func mountSmallTmpfs(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("filling a real file system needs a tmpfs mount, which needs root; plugins/stdout TestFaultWriteIsTruncatedBack covers the logic")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(size)); err != nil {
		t.Skipf("mount tmpfs: %v (no CAP_SYS_ADMIN?); plugins/stdout TestFaultWriteIsTruncatedBack covers the logic", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fillDisk writes a file in dir until its file system is full and returns
// the file's path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte{'f'}, 512)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", dir, err)
			}
			return path
		}
	}
}

// jsonLines reads a JSON-lines output back: the events of its valid lines
// and the lines that are not one whole JSON object.
func jsonLines(t *testing.T, path string) (evs []received, bad []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		e, err := decodeEnvelope(line)
		if err != nil {
			bad = append(bad, string(line))
			continue
		}
		ev, err := e.received(bytes.Clone(line))
		if err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		evs = append(evs, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return evs, bad
}

// TestStdoutSinkFullDisk runs the stdout sink against a real full disk,
// WALCAST_CHAOS rounds of: some changes, the disk filled, more changes
// (their writes fail with ENOSPC), the disk freed. Both ways the sink
// writes:
//   - path on the full file system: a failed batch used to leave half an
//     envelope at the end of the file, and the retry was glued to it. The
//     file must be valid JSON lines holding every change;
//   - walcast's own stdout redirected to a file on it: the lines used to
//     go through go-plugin's stdio stream, whose failed write came after
//     the ack, and the changes were lost. Every change must arrive in a
//     whole line (a stream cannot take back a partial line: it is ended
//     with a newline and stays as a fragment of its own).
//
// While the disk is full the slot must not move past the changes.
func TestStdoutSinkFullDisk(t *testing.T) {
	for _, mode := range []string{"path", "walcast stdout"} {
		t.Run(mode, func(t *testing.T) { testStdoutFullDisk(t, mode == "path") })
	}
}

func testStdoutFullDisk(t *testing.T, toPath bool) {
	rounds := pgtest.Chaos(t, 1)
	name := "fdstdout"
	if toPath {
		name = "fdpath"
	}
	slot := "walcast_" + name
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, pad text NOT NULL)`)
	truthSlot(t, dsn, db, "truth_"+name)
	// A round writes about 120 KB of lines (more with lines written
	// again); the rest of the file system is for the filler.
	dir := mountSmallTmpfs(t, (256+160*rounds)<<10)
	out := filepath.Join(dir, "events.jsonl")
	cfg := fmt.Sprintf("    path = %q\n", out)
	if !toPath {
		cfg = " "
	}
	pipeline := writePipeline(t, name, dsn, []string{"public.items"}, sinkSpec{
		ID: "out", SinkType: "stdout", Batch: 50, Config: cfg, Extra: "    max_attempts = 1000\n    retry_base = \"50ms\"\n",
	})
	var proc *walcastProc
	if toPath {
		proc = startWalcast(t, pipeline)
	} else {
		proc = startWalcastStdout(t, pipeline, out)
	}
	waitSlot(t, db, slot)

	next := 1
	for r := range rounds {
		exec1(t, db, `INSERT INTO items SELECT g, 'small' FROM generate_series($1::int, $1::int + 19) g`, next)
		next += 20
		end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
		waitFor(t, "the first changes written", 2*time.Minute, func() bool { return confirmedFlush(t, db, slot) >= end })

		filler := fillDisk(t, dir)
		failures := countLines(proc.logText(), "no space left on device")
		exec1(t, db, `INSERT INTO items SELECT g, repeat('x', 300) FROM generate_series($1::int, $1::int + 199) g`, next)
		next += 200
		end = lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
		waitFor(t, "walcast to report the full disk", 2*time.Minute, func() bool {
			return countLines(proc.logText(), "no space left on device") > failures
		})
		if got := confirmedFlush(t, db, slot); got >= end {
			evs, _ := jsonLines(t, out)
			t.Fatalf("round %d: the slot moved past the changes while the disk was full: they were acknowledged; %d events are in the output", r, len(evs))
		}
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the changes written once there is room", 2*time.Minute, func() bool { return confirmedFlush(t, db, slot) >= end })
	}
	proc.stop()

	evs, bad := jsonLines(t, out)
	for _, l := range bad {
		// An envelope starts with its string id; a row key's id is a
		// number. A second start in a line is an event glued to a fragment.
		if toPath || strings.Count(l, `{"id":"`) > 1 {
			t.Errorf("line of %d bytes is not JSON (an event glued to a fragment?): %.120s ... %.120s", len(l), l, l[max(len(l)-120, 0):])
		}
	}
	if t.Failed() {
		t.Fatalf("%d of the output's lines are not JSON; %d whole events", len(bad), len(evs))
	}
	dups := verify(t, truth(t, db, "truth_"+name, map[string]bool{"public.items": true}), evs)
	t.Logf("%d rounds: %d changes, all in whole lines (%d written twice, %d fragment lines)", rounds, len(evs)-dups, dups, len(bad))
}
