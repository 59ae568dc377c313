package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walcast/walcast/host/internal/delivery/isolate"
)

// Pipeline files as a user writes them, and the edits tests make to one.

type sinkSpec struct {
	ID, URL  string
	Batch    int
	Extra    string // more lines for the delivery block
	Durable  *bool
	SinkType string
	Config   string // overrides the config block body
	Top      string // more lines at the top of the sink block (format, …)
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
		b.WriteString(s.Top)
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

// pipelineDir writes one pipeline per receiver, all on public.items, into
// one directory (walcast run takes it as the set), and returns the
// directory and each pipeline's file.
func pipelineDir(t *testing.T, dsn, prefix string, rcvs []*receiver) (dir string, files []string) {
	t.Helper()
	dir = t.TempDir()
	for i, r := range rcvs {
		name := fmt.Sprintf("%s%d", prefix, i)
		src := writePipeline(t, name, dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: r.URL, Batch: 10})
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, name+".hcl")
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, dst)
	}
	return dir, files
}

// withSource adds lines to the source block of a pipeline file.
func withSource(t testing.TB, path string, lines string) {
	t.Helper()
	editPipeline(t, path, "]\n}\n", "]\n"+lines+"}\n")
}

// editPipeline replaces the first old in a pipeline file with new; it
// fails the test when the file has no old, so that an edit cannot miss
// silently.
func editPipeline(t testing.TB, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("pipeline %s has no %q to edit:\n%s", path, old, b)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}
