package pluginkit

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"
)

func TestLogHandlerWritesHCLogJSON(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(newLogHandler(&buf, LevelTrace)).With("@module", "walcast-sink-test")
	log.Log(context.Background(), LevelTrace, "tracing", "n", 1)
	log.Warn("posting batch", "url", "http://example.invalid", slog.Group("http", "status", 503))

	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", len(lines), buf.Bytes())
	}
	var first, second map[string]any
	if err := json.Unmarshal(lines[0], &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(lines[1], &second); err != nil {
		t.Fatal(err)
	}
	if first["@level"] != "trace" || first["@message"] != "tracing" || first["n"] != 1.0 {
		t.Errorf("first line = %v", first)
	}
	if second["@level"] != "warn" || second["@message"] != "posting batch" ||
		second["@module"] != "walcast-sink-test" || second["url"] != "http://example.invalid" {
		t.Errorf("second line = %v", second)
	}
	if g, ok := second["http"].(map[string]any); !ok || g["status"] != 503.0 {
		t.Errorf("group http = %v", second["http"])
	}
	// go-plugin drops the whole entry when the timestamp has another layout.
	ts, _ := second["@timestamp"].(string)
	if _, err := time.Parse(hclogTimeFormat, ts); err != nil {
		t.Errorf("@timestamp %q: %v", ts, err)
	}
}

func TestParseLevel(t *testing.T) {
	for in, want := range map[string]slog.Level{
		"trace": LevelTrace, "DEBUG": slog.LevelDebug, "info": slog.LevelInfo,
		" warn ": slog.LevelWarn, "error": slog.LevelError, "": slog.LevelInfo, "loud": slog.LevelInfo,
	} {
		if got := parseLevel(in); got != want {
			t.Errorf("parseLevel(%q) = %v, want %v", in, got, want)
		}
	}
}
