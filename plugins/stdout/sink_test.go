package main

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/walcast/walcast/pluginkit"
)

func TestFileAppendsOneLinePerEvent(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(path, []byte(`{"earlier":true}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	s := newSink(slog.New(slog.NewTextHandler(io.Discard, nil)))
	cfg, _ := json.Marshal(map[string]string{"path": path})
	if err := s.Configure(ctx, cfg); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	if _, err := s.Open(ctx); err != nil {
		t.Fatalf("Open: %v", err)
	}
	batches := [][]pluginkit.Event{
		{
			{ID: pluginkit.MustParseEventID("0/16B3748:0"), Payload: []byte(`{"id":"0/16B3748:0","op":"insert"}`)},
			{ID: pluginkit.MustParseEventID("0/16B3748:1"), Payload: []byte(`{"id":"0/16B3748:1","op":"update"}`)},
		},
		{
			{ID: pluginkit.MustParseEventID("0/16B3900:0"), Payload: []byte(`{"id":"0/16B3900:0","op":"delete"}`)},
		},
	}
	for _, b := range batches {
		if _, err := s.Deliver(ctx, b); err != nil {
			t.Fatalf("Deliver: %v", err)
		}
	}
	// A successful Deliver means the bytes are in the file, before Close.
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"earlier":true}` + "\n" +
		`{"id":"0/16B3748:0","op":"insert"}` + "\n" +
		`{"id":"0/16B3748:1","op":"update"}` + "\n" +
		`{"id":"0/16B3900:0","op":"delete"}` + "\n"
	if string(got) != want {
		t.Errorf("file =\n%s\nwant\n%s", got, want)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestConfigureRejectsWrongType(t *testing.T) {
	s := newSink(slog.New(slog.NewTextHandler(io.Discard, nil)))
	err := s.Configure(t.Context(), json.RawMessage(`{"path": 3}`))
	var ce *pluginkit.ConfigError
	if !errors.As(err, &ce) || ce.Field != "path" {
		t.Fatalf("Configure = %v, want a ConfigError for path", err)
	}
}

func TestOpenFailsOnUnwritablePath(t *testing.T) {
	ctx := t.Context()
	s := newSink(slog.New(slog.NewTextHandler(io.Discard, nil)))
	cfg, _ := json.Marshal(map[string]string{"path": filepath.Join(t.TempDir(), "missing", "dir", "x.jsonl")})
	if err := s.Configure(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx); err == nil {
		t.Fatal("Open succeeded on a path in a missing directory")
	}
}

// A path that is not a regular file (a character device, a FIFO) cannot
// be fsynced; writing to it must still succeed.
func TestDevNullPath(t *testing.T) {
	ctx := t.Context()
	s := newSink(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := s.Configure(ctx, json.RawMessage(`{"path":"/dev/null"}`)); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	if _, err := s.Open(ctx); err != nil {
		t.Fatalf("Open: %v", err)
	}
	ev := pluginkit.Event{ID: pluginkit.MustParseEventID("0/16B3748:0"), Payload: []byte(`{"id":"0/16B3748:0"}`)}
	if _, err := s.Deliver(ctx, []pluginkit.Event{ev}); err != nil {
		t.Fatalf("Deliver to /dev/null: %v", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
