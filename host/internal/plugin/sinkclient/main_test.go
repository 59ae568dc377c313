package sinkclient

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// binDir holds the real plugin binaries, built once for the package.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "sinkclient-plugins-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	for _, name := range []string{"webhook", "stdout"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, ExecutableName(name)), "github.com/walcast/walcast/plugins/"+name)
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build plugin %s: %v\n%s", name, err, out)
			return 1
		}
	}
	binDir = dir
	return m.Run()
}

func pluginPath(t testing.TB, sinkType string) string {
	t.Helper()
	path, err := Find(sinkType, []string{binDir})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// record is one log record with its attributes flattened.
type record struct {
	level slog.Level
	msg   string
	attrs map[string]any
}

// recorder is a slog.Handler that keeps every record, for tests.
type recorder struct {
	mu      *sync.Mutex
	records *[]record
	attrs   []slog.Attr
}

func newRecorder() *recorder {
	return &recorder{mu: new(sync.Mutex), records: new([]record)}
}

func (h *recorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *recorder) Handle(_ context.Context, r slog.Record) error {
	rec := record{level: r.Level, msg: r.Message, attrs: map[string]any{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.Any()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.Any()
		return true
	})
	h.mu.Lock()
	*h.records = append(*h.records, rec)
	h.mu.Unlock()
	return nil
}

func (h *recorder) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(slices.Clip(h.attrs), attrs...)
	return &c
}

func (h *recorder) WithGroup(string) slog.Handler { return h }

// find returns the first record with msg, if any.
func (h *recorder) find(msg string) (record, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range *h.records {
		if r.msg == msg {
			return r, true
		}
	}
	return record{}, false
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// slogWith returns a logger on h with the given attributes.
func slogWith(h slog.Handler, args ...any) *slog.Logger { return slog.New(h).With(args...) }
