package sinkclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// levelTrace is the slog level hclog's trace maps to.
const levelTrace = slog.LevelDebug - 4

// hclogSlog is an hclog.Logger that forwards to a slog.Logger. go-plugin
// logs through it, both its own messages and every line a plugin writes to
// its stderr (parsed from hclog JSON, or passed on as text), so plugin logs
// land in the host's structured log. The slog logger decides what is kept:
// SetLevel is ignored.
type hclogSlog struct {
	log     *slog.Logger
	name    string
	implied []any
	exit    *exitNote // shared by the loggers derived from one
}

var _ hclog.Logger = (*hclogSlog)(nil)

func newHCLogSlog(log *slog.Logger) *hclogSlog { return &hclogSlog{log: log, exit: &exitNote{}} }

// msgProcessExited is go-plugin's line for every plugin process exit: at
// info for a clean one, which each start has (the plugin launched to
// describe itself is stopped) as does each stop, and at error with the
// cause for any other. The host says itself what matters (sink ready,
// sink stopped, sink plugin process died), so the line goes to debug and
// its cause is kept for the host's own line.
const msgProcessExited = "plugin process exited"

// exitNote keeps the cause go-plugin logged for a plugin process's exit.
type exitNote struct {
	mu  sync.Mutex
	err string
}

func (n *exitNote) set(err string) {
	n.mu.Lock()
	n.err = err
	n.mu.Unlock()
}

func (n *exitNote) get() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

// droppedKeys are attributes go-plugin adds to each re-emitted plugin line
// that only repeat what the host's own record already has: the plugin's
// clock and its executable name (the record carries sink=<id>).
var droppedKeys = map[string]bool{"timestamp": true, "@module": true}

// Log re-emits one record. URLs in the message and in attribute values
// are cut to scheme and host (redactURLs): a plugin's lines, and the
// errors go-plugin logs about it, must not carry a sink URL's credentials
// into walcast's log.
func (l *hclogSlog) Log(level hclog.Level, msg string, args ...any) {
	msg = redactURLs(msg)
	lvl := slogLevel(level)
	if msg == msgProcessExited && l.name == "" {
		lvl = slog.LevelDebug
		for i := 0; i+1 < len(args); i += 2 {
			if k, _ := args[i].(string); k == "error" {
				l.exit.set(redactURLs(fmt.Sprint(args[i+1])))
			}
		}
	}
	ctx := context.Background()
	if !l.log.Enabled(ctx, lvl) {
		return
	}
	attrs := make([]any, 0, len(args))
	for i := 0; i+1 < len(args); i += 2 {
		if k, ok := args[i].(string); ok && droppedKeys[k] {
			continue
		}
		attrs = append(attrs, args[i], redactValue(args[i+1]))
	}
	if len(args)%2 == 1 {
		attrs = append(attrs, "EXTRA_VALUE", redactValue(args[len(args)-1]))
	}
	l.log.Log(ctx, lvl, msg, attrs...)
}

func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return levelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (l *hclogSlog) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *hclogSlog) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *hclogSlog) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *hclogSlog) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *hclogSlog) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *hclogSlog) enabled(level hclog.Level) bool {
	return l.log.Enabled(context.Background(), slogLevel(level))
}

func (l *hclogSlog) IsTrace() bool { return l.enabled(hclog.Trace) }
func (l *hclogSlog) IsDebug() bool { return l.enabled(hclog.Debug) }
func (l *hclogSlog) IsInfo() bool  { return l.enabled(hclog.Info) }
func (l *hclogSlog) IsWarn() bool  { return l.enabled(hclog.Warn) }
func (l *hclogSlog) IsError() bool { return l.enabled(hclog.Error) }

func (l *hclogSlog) ImpliedArgs() []any { return l.implied }

func (l *hclogSlog) With(args ...any) hclog.Logger {
	return &hclogSlog{
		log:     l.log.With(args...),
		name:    l.name,
		implied: append(l.implied[:len(l.implied):len(l.implied)], args...),
		exit:    l.exit,
	}
}

func (l *hclogSlog) Name() string { return l.name }

func (l *hclogSlog) Named(name string) hclog.Logger {
	if l.name != "" {
		name = l.name + "." + name
	}
	return l.ResetNamed(name)
}

func (l *hclogSlog) ResetNamed(name string) hclog.Logger {
	return &hclogSlog{log: l.log, name: name, implied: l.implied, exit: l.exit}
}

// SetLevel is a no-op: the slog handler owns the level.
func (l *hclogSlog) SetLevel(hclog.Level) {}

// GetLevel reports the lowest level the slog handler keeps, so that
// go-plugin skips parsing plugin lines that would be dropped anyway.
func (l *hclogSlog) GetLevel() hclog.Level {
	for _, lvl := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if l.enabled(lvl) {
			return lvl
		}
	}
	return hclog.Off
}

func (l *hclogSlog) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(l.log.Handler(), slog.LevelInfo)
}

func (l *hclogSlog) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return l.StandardLogger(nil).Writer()
}

// hclogLevelName maps hclog's level names ("@level") to hclog levels.
func hclogLevelName(s string) hclog.Level { return hclog.LevelFromString(s) }

// lineLogger is the writer for what a plugin writes to os.Stderr after
// pluginkit.Serve started, which go-plugin forwards over its stdio stream
// rather than the process's stderr. Each complete line becomes one record:
// hclog JSON lines keep their level, message and attributes, anything else
// is logged as text at info.
type lineLogger struct {
	log *hclogSlog

	mu  sync.Mutex
	buf []byte
}

func newLineLogger(log *hclogSlog) *lineLogger { return &lineLogger{log: log} }

// maxLine bounds a line kept while waiting for its newline.
const maxLine = 64 << 10

func (w *lineLogger) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.emit(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > maxLine {
		w.emit(w.buf)
		w.buf = w.buf[:0]
	}
	if len(w.buf) == 0 {
		w.buf = nil // do not keep a large backing array alive
	}
	return len(p), nil
}

func (w *lineLogger) emit(line []byte) {
	line = bytes.TrimRight(line, "\r")
	if len(bytes.TrimSpace(line)) == 0 {
		return
	}
	var entry map[string]any
	if json.Unmarshal(line, &entry) == nil {
		msg, okMsg := entry["@message"].(string)
		lvl, okLvl := entry["@level"].(string)
		if okMsg && okLvl {
			args := make([]any, 0, 2*len(entry))
			for _, k := range slices.Sorted(maps.Keys(entry)) {
				if k == "@message" || k == "@level" || k == "@timestamp" {
					continue
				}
				args = append(args, k, entry[k])
			}
			w.log.Log(hclogLevelName(lvl), msg, args...)
			return
		}
	}
	w.log.Info(string(line), "stream", "stderr")
}
