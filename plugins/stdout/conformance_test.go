package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/pluginkit/sinktest"
)

// TestConformance runs pluginkit/sinktest against the file mode of the
// sink; the file is the destination the suite reads back.
func TestConformance(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	cfg, err := json.Marshal(map[string]string{"path": path})
	if err != nil {
		t.Fatal(err)
	}
	sinktest.Run(t, sinktest.Config{
		New:    func() pluginkit.Sink { return newSink(slog.New(slog.NewTextHandler(io.Discard, nil))) },
		Config: cfg,
		InvalidConfigs: []sinktest.InvalidConfig{
			{Name: "path not a string", Config: json.RawMessage(`{"path":3}`), Field: "path"},
		},
		Received: func() [][]byte { return readLines(t, path) },
	})
}

// readLines returns the file's lines without their newlines; a missing
// file has none.
func readLines(t *testing.T, path string) [][]byte {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Errorf("read back %s: %v", path, err)
		return nil
	}
	lines := bytes.Split(b, []byte("\n"))
	if n := len(lines); n > 0 && len(lines[n-1]) == 0 {
		lines = lines[:n-1]
	}
	return lines
}
