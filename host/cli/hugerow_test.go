package cli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// streamReceiver is a webhook endpoint that reads each request as a
// stream and keeps only its size, how many 'x' bytes it held and its
// first bytes, so a body of hundreds of MB is never held by the test
// (which runs under -race). Requests whose Content-Length is above limit
// (when set) get 413 unread.
type streamReceiver struct {
	URL     string
	limit   int64
	mu      sync.Mutex
	got     []streamed
	refused int
}

type streamed struct {
	size, xs int64
	head     string
}

func newStreamReceiver(t testing.TB, limit int64) *streamReceiver {
	t.Helper()
	r := &streamReceiver{limit: limit}
	r.URL = serveLoopback(t, r) + "/hooks"
	return r
}

func (r *streamReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if r.limit > 0 && req.ContentLength > r.limit {
		r.mu.Lock()
		r.refused++
		r.mu.Unlock()
		http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		return
	}
	s, err := countStream(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.got = append(r.got, s)
	r.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// countStream reads r to its end through a small buffer.
func countStream(r io.Reader) (streamed, error) {
	var s streamed
	buf := make([]byte, 256<<10)
	for {
		n, err := r.Read(buf)
		if len(s.head) < 200 {
			s.head += string(buf[:min(n, 200-len(s.head))])
		}
		s.size += int64(n)
		s.xs += int64(bytes.Count(buf[:n], []byte{'x'}))
		if err == io.EOF {
			return s, nil
		}
		if err != nil {
			return s, err
		}
	}
}

func (r *streamReceiver) requests() []streamed {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]streamed(nil), r.got...)
}

// peakRSS is a process's peak resident set (VmHWM) in bytes.
func peakRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// TestHugeRow: one row with a 200 MB value (PostgreSQL allows up to 1 GB)
// reaches a stdout sink and a webhook whole, with the host's peak memory
// within 3x the row. test_decoding is the truth for the value's size (its
// output is measured inside PostgreSQL, never fetched).
func TestHugeRow(t *testing.T) {
	const size = 200 << 20
	dsn, db := newSource(t, `CREATE TABLE big (id int PRIMARY KEY, body text NOT NULL)`)
	rcv := newStreamReceiver(t, 0)
	out := filepath.Join(t.TempDir(), "events.jsonl")
	pipeline := writePipeline(t, "huge", dsn, []string{"public.big"},
		sinkSpec{ID: "hook", URL: rcv.URL, Config: fmt.Sprintf("    url = %q\n    timeout = \"2m\"\n", rcv.URL)},
		sinkSpec{ID: "out", SinkType: "stdout", Config: fmt.Sprintf("    path = %q\n", out)})
	truthSlot(t, dsn, db, "truth_huge")
	proc := startCapturing(t, db, pipeline)
	proc.waitLog(t, "streaming from slot")
	begin := time.Now()
	exec1(t, db, `INSERT INTO big VALUES (1, repeat('x', $1))`, size)
	exec1(t, db, `INSERT INTO big VALUES (2, 'small')`)

	var truthLen int64
	if err := db.QueryRow(context.Background(), `SELECT length(data) FROM pg_logical_slot_peek_changes('truth_huge', NULL, NULL)
		WHERE data LIKE 'table public.big: INSERT: id[integer]:1 %'`).Scan(&truthLen); err != nil {
		t.Fatal(err)
	}
	if want := int64(len(`table public.big: INSERT: id[integer]:1 body[text]:''`)) + size; truthLen != want {
		t.Fatalf("test_decoding line of %d bytes, want %d", truthLen, want)
	}

	waitFor(t, "the huge row at the webhook", 5*time.Minute, func() bool {
		n := int64(0)
		for _, s := range rcv.requests() {
			n += s.xs
		}
		return n >= size && len(rcv.requests()) >= 1 && strings.Contains(readHead(out), "small")
	})
	took := time.Since(begin)
	waitFor(t, "both rows in the stdout file", 2*time.Minute, func() bool {
		if fi, err := os.Stat(out); err != nil || fi.Size() < size {
			return false // not worth reading yet
		}
		s, lines := fileCount(t, out)
		return lines == 2 && s.xs >= size
	})
	host := peakRSS(proc.cmd.Process.Pid)
	var plugins []int64
	for _, pid := range childPIDs(proc.cmd.Process.Pid) {
		plugins = append(plugins, peakRSS(pid)>>20)
	}
	proc.stop()
	var big streamed
	for _, s := range rcv.requests() {
		if s.xs > big.xs {
			big = s
		}
	}
	// Every 'x' of the value, plus the one of each envelope's "xid".
	if big.xs < size || big.xs > size+10 || !strings.Contains(big.head, `"table":"big","op":"insert","key":{"id":1}`) {
		t.Fatalf("webhook got a request with %d 'x' of %d (head %q)", big.xs, size, big.head)
	}
	t.Logf("row of %d MiB (event %d bytes) delivered to webhook and stdout in %s; peak RSS: host %d MiB, plugins %v MiB",
		size>>20, big.size, took.Round(time.Millisecond), host>>20, plugins)
	if host > 3*size {
		t.Errorf("host peak memory %d MiB for one row of %d MiB, want at most 3x", host>>20, size>>20)
	}
}

// readHead returns the file's short lines (under 1 KiB) — enough to see
// which small events arrived.
func readHead(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var b strings.Builder
	r := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := r.ReadSlice('\n')
		if len(line) < 1<<10 {
			b.Write(line)
		}
		if err == io.EOF {
			return b.String()
		}
		if err != nil && err != bufio.ErrBufferFull {
			return b.String()
		}
	}
}

// fileCount streams a file: its 'x' count and lines.
func fileCount(t testing.TB, path string) (streamed, int) {
	f, err := os.Open(path)
	if err != nil {
		return streamed{}, 0
	}
	defer f.Close()
	var s streamed
	lines := 0
	buf := make([]byte, 256<<10)
	for {
		n, err := f.Read(buf)
		s.size += int64(n)
		s.xs += int64(bytes.Count(buf[:n], []byte{'x'}))
		lines += bytes.Count(buf[:n], []byte{'\n'})
		if err != nil {
			return s, lines
		}
	}
}

// TestTooLargeForDestinationParksAtOnce: a webhook that refuses a request
// as too large (413) has the event parked on its first failure, with the
// reason, while the next row is delivered.
func TestTooLargeForDestinationParksAtOnce(t *testing.T) {
	const size = 20 << 20
	dsn, db := newSource(t, `CREATE TABLE big (id int PRIMARY KEY, body text NOT NULL)`)
	rcv := newStreamReceiver(t, 10<<20)
	pipeline := writePipeline(t, "toolarge", dsn, []string{"public.big"},
		sinkSpec{ID: "hook", URL: rcv.URL, Extra: "    retry_base = \"1m\"\n"})
	proc := startCapturing(t, db, pipeline)
	exec1(t, db, `INSERT INTO big VALUES (1, repeat('x', $1))`, size)
	exec1(t, db, `INSERT INTO big VALUES (2, 'small')`)
	var attempts int
	var lastErr string
	waitFor(t, "the big row parked", time.Minute, func() bool {
		err := db.QueryRow(context.Background(), `SELECT attempts, last_error FROM walcast.parked WHERE sink = 'hook'`).Scan(&attempts, &lastErr)
		return err == nil
	})
	// retry_base is a minute: parked within it means parked on the first
	// failure.
	waitFor(t, "the small row", time.Minute, func() bool { return len(rcv.requests()) == 1 })
	proc.stop()
	if attempts != 1 || !strings.Contains(lastErr, "413") {
		t.Fatalf("parked after %d attempts with %q, want 1 attempt and the 413", attempts, lastErr)
	}
}
