package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/walcast/walcast/pluginkit"
)

// chaos is the WALCAST_CHAOS scale factor for fault tests (1 when unset).
func chaos(t *testing.T) int {
	v := os.Getenv("WALCAST_CHAOS")
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("WALCAST_CHAOS=%q: want a positive integer", v)
	}
	return n
}

// batch makes n events whose payloads are padded to about size bytes;
// first numbers them so that every batch of a test is distinct.
func batch(first, n, size int) []pluginkit.Event {
	out := make([]pluginkit.Event, n)
	for i := range out {
		id := fmt.Sprintf("0/%X:%d", 0x16B3748+first+i, 0)
		p := fmt.Sprintf(`{"id":%q,"op":"insert","new":{"pad":"`, id)
		p += strings.Repeat("x", max(size-len(p)-3, 0)) + `"}}`
		out[i] = pluginkit.Event{ID: pluginkit.MustParseEventID(id), Payload: []byte(p)}
	}
	return out
}

// lines is what a batch must look like in the output.
func lines(evs ...[]pluginkit.Event) string {
	var b strings.Builder
	for _, es := range evs {
		for _, e := range es {
			b.Write(e.Payload)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func openFileSink(t *testing.T, path string, open func(string) (outputFile, error)) *Sink {
	t.Helper()
	s := newSink(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if open != nil {
		s.openFile = open
	}
	cfg, _ := json.Marshal(map[string]string{"path": path})
	if err := s.Configure(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(t.Context()) })
	return s
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// mountTmpfs mounts a tmpfs of size bytes on a temporary directory. It
// skips the test, saying why, where that is impossible (not root, no
// CAP_SYS_ADMIN); the injected-fault tests below cover the same logic
// everywhere.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs to fill needs root; TestFaultWriteIsTruncatedBack covers the same logic with an injected fault")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(size)); err != nil {
		t.Skipf("mount tmpfs: %v (no CAP_SYS_ADMIN here?); TestFaultWriteIsTruncatedBack covers the same logic with an injected fault", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes a file in dir until the file system is full.
func fill(t *testing.T, dir string) string {
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

// TestFullDiskLeavesFileAsBefore fills a real (tmpfs) file system while
// the sink appends to a file on it. The first write that fails with
// ENOSPC writes part of the batch (the room left in the file's last page)
// before failing; the file must still end exactly where it ended before
// the batch, so that the batch written again once there is room is not
// glued to half an envelope. Repeated WALCAST_CHAOS times.
func TestFullDiskLeavesFileAsBefore(t *testing.T) {
	rounds := 3 * chaos(t)
	// Room for every round's batches (about 8.5 KB) and a filler.
	dir := mountTmpfs(t, (64+12*rounds)<<10)
	path := filepath.Join(dir, "events.jsonl")
	s := openFileSink(t, path, nil)
	want := ""
	for r := range rounds {
		small := batch(1000*r, 3, 100)
		if _, err := s.Deliver(t.Context(), small); err != nil {
			t.Fatalf("round %d: Deliver with room: %v", r, err)
		}
		want += lines(small)
		filler := fill(t, dir)
		big := batch(1000*r+100, 40, 200) // 8 KB: more than the room left in the last page
		for attempt := range 2 {
			_, err := s.Deliver(t.Context(), big)
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("round %d attempt %d: Deliver on a full disk = %v, want ENOSPC", r, attempt, err)
			}
			if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindRetryable {
				t.Errorf("a full disk is %s, want retryable", kind)
			}
			if r == 0 && attempt == 0 {
				t.Logf("Deliver on a full disk: %v", err)
			}
			if got := readFile(t, path); got != want {
				t.Fatalf("round %d attempt %d: after a failed batch the file has %d bytes, want the %d it had before (it ends %q)",
					r, attempt, len(got), len(want), got[max(len(got)-60, 0):])
			}
		}
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Deliver(t.Context(), big); err != nil {
			t.Fatalf("round %d: Deliver once there is room: %v", r, err)
		}
		want += lines(big)
		if got := readFile(t, path); got != want {
			t.Fatalf("round %d: file is not exactly the delivered batches: %d bytes, want %d", r, len(got), len(want))
		}
	}
}

// faultyFile is an *os.File whose next write fails after writing only
// writeRoom bytes (-1: no fault) and whose next fsync fails (syncFail).
type faultyFile struct {
	*os.File
	fs *faultyFS
}

type faultyFS struct {
	mu        sync.Mutex
	writeRoom int
	syncFail  bool
	opens     int
	closed    []*faultyFile
}

func (fs *faultyFS) open(path string) (outputFile, error) {
	f, err := openAppend(path)
	if err != nil {
		return nil, err
	}
	fs.mu.Lock()
	fs.opens++
	fs.mu.Unlock()
	return &faultyFile{File: f.(*os.File), fs: fs}, nil
}

func (f *faultyFile) Write(p []byte) (int, error) {
	f.fs.mu.Lock()
	room := f.fs.writeRoom
	if room >= 0 && room < len(p) {
		f.fs.writeRoom = -1
		f.fs.mu.Unlock()
		n, _ := f.File.Write(p[:room])
		return n, syscall.ENOSPC
	}
	f.fs.mu.Unlock()
	return f.File.Write(p)
}

func (f *faultyFile) Sync() error {
	f.fs.mu.Lock()
	fail := f.fs.syncFail
	f.fs.syncFail = false
	f.fs.mu.Unlock()
	if fail {
		return syscall.EIO
	}
	return f.File.Sync()
}

func (f *faultyFile) Close() error {
	f.fs.mu.Lock()
	f.fs.closed = append(f.fs.closed, f)
	f.fs.mu.Unlock()
	return f.File.Close()
}

// TestFaultWriteIsTruncatedBack is the full disk with an injected fault,
// so that it runs without root: a write that fails halfway through a line
// leaves the file as it was before the batch.
func TestFaultWriteIsTruncatedBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	fs := &faultyFS{writeRoom: -1}
	s := openFileSink(t, path, fs.open)
	a, b := batch(0, 3, 100), batch(10, 5, 100)
	if _, err := s.Deliver(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	fs.writeRoom = 150 // one line and a half
	fs.mu.Unlock()
	if _, err := s.Deliver(t.Context(), b); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Deliver = %v, want ENOSPC", err)
	}
	if got := readFile(t, path); got != lines(a) {
		t.Fatalf("after a failed write the file is %d bytes ending %q, want the %d bytes before the batch", len(got), got[max(len(got)-40, 0):], len(lines(a)))
	}
	if _, err := s.Deliver(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, path); got != lines(a, b) {
		t.Fatalf("file = %q\nwant %q", got, lines(a, b))
	}
}

// TestFailedFsyncIsNotTrusted: after a failed fsync the kernel may have
// dropped the dirty pages and cleared the error, so a second fsync on the
// same descriptor can succeed over lost data (PostgreSQL's fsync lesson).
// The sink takes the batch back out of the file, closes the descriptor and
// writes the batch again through a new one; the file then holds each
// batch once.
func TestFailedFsyncIsNotTrusted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	fs := &faultyFS{writeRoom: -1}
	s := openFileSink(t, path, fs.open)
	a, b := batch(0, 3, 100), batch(10, 5, 100)
	if _, err := s.Deliver(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	fs.syncFail = true
	fs.mu.Unlock()
	_, err := s.Deliver(t.Context(), b)
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "sync "+path) {
		t.Fatalf("Deliver with a failing fsync = %v, want the fsync's EIO", err)
	}
	if got := readFile(t, path); got != lines(a) {
		t.Fatalf("after a failed fsync the file is %d bytes, want the %d before the batch", len(got), len(lines(a)))
	}
	fs.mu.Lock()
	closed, opens := len(fs.closed), fs.opens
	fs.mu.Unlock()
	if closed != 1 {
		t.Fatalf("the descriptor whose fsync failed was closed %d times, want once: a failed fsync must not be retried on it", closed)
	}
	if _, err := s.Deliver(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	opens = fs.opens - opens
	fs.mu.Unlock()
	if opens != 1 {
		t.Errorf("the retry opened the file %d times, want once", opens)
	}
	if got := readFile(t, path); got != lines(a, b) {
		t.Fatalf("file = %q\nwant each batch once: %q", got, lines(a, b))
	}
}

// brokenPipe is a stream (walcast's stdout, a pipe) whose next write
// fails after room bytes; it cannot be truncated.
type brokenPipe struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	room int // -1: no fault
}

func (p *brokenPipe) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.room >= 0 && p.room < len(b) {
		n, _ := p.buf.Write(b[:p.room])
		p.room = -1
		return n, syscall.EPIPE
	}
	return p.buf.Write(b)
}

// TestStreamFailedWrite: a pipe or walcast's stdout cannot take back what
// a failed write put out. The batch is not acknowledged (Deliver fails),
// and the partial line is ended with a newline before the batch is
// written again, so every event of the retry is a whole line of its own
// and never glued to the fragment.
func TestStreamFailedWrite(t *testing.T) {
	pipe := &brokenPipe{room: -1}
	s := newSink(slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.stdout = func() io.Writer { return pipe }
	if err := s.Configure(t.Context(), json.RawMessage(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	a, b := batch(0, 3, 100), batch(10, 5, 100)
	if _, err := s.Deliver(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	pipe.mu.Lock()
	pipe.room = 150
	pipe.mu.Unlock()
	if _, err := s.Deliver(t.Context(), b); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("Deliver to a failing stream = %v, want its error", err)
	}
	if _, err := s.Deliver(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	pipe.mu.Lock()
	out := pipe.buf.String()
	pipe.mu.Unlock()
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	whole := map[string]bool{}
	for _, l := range got {
		whole[l] = true
	}
	for _, e := range append(a, b...) {
		if !whole[string(e.Payload)] {
			t.Errorf("event %s is not a line of its own in the output:\n%s", e.ID, out)
		}
	}
	if !strings.HasSuffix(out, "\n"+lines(b)) {
		t.Errorf("the retried batch is not whole lines at the end of the output:\n%s", out)
	}
}

// TestOpenCutsIncompleteLastLine: a file that ends in part of a line (a
// crash in the middle of a batch, which was therefore never acknowledged)
// is cut back to its last whole line when the sink opens it, so the next
// batch does not start inside that fragment.
func TestOpenCutsIncompleteLastLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	a, b := batch(0, 3, 100), batch(10, 2, 100)
	if err := os.WriteFile(path, []byte(lines(a)+`{"id":"0/16B37FF:0","op":"ins`), 0o644); err != nil {
		t.Fatal(err)
	}
	s := openFileSink(t, path, nil)
	if _, err := s.Deliver(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, path); got != lines(a, b) {
		t.Fatalf("file = %q\nwant %q", got, lines(a, b))
	}
}
