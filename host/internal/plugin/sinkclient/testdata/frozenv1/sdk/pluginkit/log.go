package pluginkit

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/walcast/walcast/proto/sink/wire"
)

// hclogTimeFormat is the layout go-plugin's host side insists on for
// "@timestamp"; a line with any other layout is not recognised as a log
// entry at all.
const hclogTimeFormat = "2006-01-02T15:04:05.000000Z07:00"

// LevelTrace is below slog.LevelDebug, for the hclog "trace" level.
const LevelTrace = slog.LevelDebug - 4

// NewLogger returns the logger a sink should use. It writes one JSON object
// per line to the plugin's stderr in hclog's format ("@level", "@message",
// "@timestamp", "@module" and the attributes), which go-plugin on the host
// side parses and the host re-emits through its own structured log, tagged
// with the sink's id. The level is the one the host asked for in
// the environment, info when unset.
//
// Call it before Serve (in main or in the sink's constructor): Serve points
// os.Stderr at go-plugin's stdio stream, and a logger created afterwards
// reaches the host through that slower path.
func NewLogger() *slog.Logger {
	return slog.New(newLogHandler(os.Stderr, parseLevel(os.Getenv(wire.EnvLogLevel)))).
		With("@module", filepath.Base(os.Args[0]))
}

// newLogHandler returns a slog handler writing hclog-format JSON lines to w.
func newLogHandler(w io.Writer, level slog.Leveler) slog.Handler {
	return slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.TimeKey:
				return slog.String("@timestamp", a.Value.Time().Format(hclogTimeFormat))
			case slog.LevelKey:
				return slog.String("@level", hclogLevel(a.Value.Any().(slog.Level)))
			case slog.MessageKey:
				return slog.Attr{Key: "@message", Value: a.Value}
			}
			return a
		},
	})
}

// hclogLevel names a slog level the way hclog does.
func hclogLevel(l slog.Level) string {
	switch {
	case l < slog.LevelDebug:
		return "trace"
	case l < slog.LevelInfo:
		return "debug"
	case l < slog.LevelWarn:
		return "info"
	case l < slog.LevelError:
		return "warn"
	default:
		return "error"
	}
}

// parseLevel reads an hclog level name; anything else is info.
func parseLevel(s string) slog.Level {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "trace":
		return LevelTrace
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}
