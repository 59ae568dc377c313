package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/pluginkit/sinktest"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestConformance is what every third-party sink should have: the SDK's
// conformance suite, run against a real destination (here a directory)
// that it reads back.
func TestConformance(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	cfg, err := json.Marshal(map[string]any{"dir": dir})
	if err != nil {
		t.Fatal(err)
	}
	sinktest.Run(t, sinktest.Config{
		NewBatch: func() pluginkit.BatchSink { return newSink(discardLogger()) },
		Config:   cfg,
		InvalidConfigs: []sinktest.InvalidConfig{
			{Name: "relative dir", Config: json.RawMessage(`{"dir":"out"}`), Field: "dir"},
			{Name: "fsync not a bool", Config: json.RawMessage(`{"dir":"/tmp/x","fsync":"yes"}`), Field: "fsync"},
		},
		Received: func() [][]byte { return readBack(t, dir) },
		Faults: []sinktest.Fault{{
			// A regular file where the directory should be: every write
			// fails, as with a full disk or an unmounted volume, even when
			// the test runs as root.
			Name: "directory replaced by a file",
			Inject: func() func() {
				moved := dir + ".moved"
				if err := os.Rename(dir, moved); err != nil {
					t.Fatalf("inject fault: %v", err)
				}
				if err := os.WriteFile(dir, nil, 0o644); err != nil {
					t.Fatalf("inject fault: %v", err)
				}
				return func() {
					if err := os.Remove(dir); err != nil {
						t.Errorf("restore: %v", err)
					}
					if err := os.Rename(moved, dir); err != nil {
						t.Errorf("restore: %v", err)
					}
				}
			},
			Want: pluginkit.KindRetryable,
		}},
	})
}

// readBack returns the payloads of every batch file in dir, the files in
// the order of their first event id.
func readBack(t *testing.T, dir string) [][]byte {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !os.IsNotExist(err) {
			t.Errorf("read back: %v", err)
		}
		return nil
	}
	type batch struct {
		first pluginkit.EventID
		name  string
	}
	var batches []batch
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue // a temporary file, not delivered yet
		}
		first, _, err := parseFileName(e.Name())
		if err != nil {
			t.Errorf("read back: %v", err)
			continue
		}
		batches = append(batches, batch{first, e.Name()})
	}
	slices.SortFunc(batches, func(a, b batch) int { return a.first.Compare(b.first) })

	var out [][]byte
	for _, b := range batches {
		data, err := os.ReadFile(filepath.Join(dir, b.name))
		if err != nil {
			t.Errorf("read back: %v", err)
			continue
		}
		for line := range bytes.Lines(data) {
			out = append(out, bytes.TrimSuffix(line, []byte("\n")))
		}
	}
	return out
}

func TestRedeliveryIsReportedAsDuplicates(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := newSink(discardLogger())
	if err := s.Configure(ctx, pluginkit.Setup{Config: json.RawMessage(`{"dir":"` + dir + `","fsync":false}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	batch := []pluginkit.Event{
		{ID: pluginkit.MustParseEventID("0/1A:0"), Payload: []byte(`{"id":"0/1A:0"}`)},
		{ID: pluginkit.MustParseEventID("0/1A:1"), Payload: []byte(`{"id":"0/1A:1"}`)},
	}
	for i, want := range []int{0, 2} {
		res, err := s.Deliver(ctx, pluginkit.Batch{Events: batch})
		if err != nil {
			t.Fatalf("Deliver %d: %v", i, err)
		}
		if res.Duplicates != want {
			t.Errorf("Deliver %d reported %d duplicates, want %d", i, res.Duplicates, want)
		}
	}
	if got := readBack(t, dir); len(got) != 2 {
		t.Errorf("the directory holds %d events, want 2", len(got))
	}
}

// A replay is written to a file of its own even when the batch's file
// exists: parked events must be written, never taken for duplicates.
func TestReplayIsWritten(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	s := newSink(discardLogger())
	if err := s.Configure(ctx, pluginkit.Setup{Config: json.RawMessage(`{"dir":"` + dir + `","fsync":false}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	batch := []pluginkit.Event{{ID: pluginkit.MustParseEventID("0/1A:0"), Payload: []byte(`{"id":"0/1A:0"}`)}}
	for i, replay := range []bool{false, true} {
		res, err := s.Deliver(ctx, pluginkit.Batch{Events: batch, Replay: replay})
		if err != nil || res.Duplicates != 0 {
			t.Fatalf("Deliver %d (replay %v): %+v, %v", i, replay, res, err)
		}
	}
	if got := readBack(t, dir); len(got) != 2 {
		t.Errorf("the directory holds %d events, want the batch and its replay", len(got))
	}
}

func TestFileNamesSortLikeIDs(t *testing.T) {
	ids := []string{"0/A:0", "0/A:10", "0/1A:0", "0/A:2", "1/0:0"}
	var names []string
	for _, s := range ids {
		id := pluginkit.MustParseEventID(s)
		name := fileName(id, id)
		first, last, err := parseFileName(name)
		if err != nil || first != id || last != id {
			t.Fatalf("parseFileName(%q) = %v, %v, %v; want %v", name, first, last, err, id)
		}
		names = append(names, name)
	}
	slices.Sort(names) // what `ls` does
	slices.SortFunc(ids, pluginkit.CompareEventIDs)
	for i, name := range names {
		first, _, _ := parseFileName(name)
		if first.String() != ids[i] {
			t.Errorf("file %d in name order holds %s, want %s", i, first, ids[i])
		}
	}
	if _, _, err := parseFileName("notes.txt"); err == nil {
		t.Error("parseFileName accepted notes.txt")
	}
}
