package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/walcast/walcast/pluginkit"
)

// Sink writes JSON lines, one envelope per line, flushed once per batch.
type Sink struct {
	log *slog.Logger

	mu   sync.Mutex // serialises batches so lines never interleave
	path string     // empty: stdout
	file outputFile // open while path is set and the sink is open
	sync bool       // file is a regular file, fsynced after each batch
	w    *bufio.Writer

	// openFile opens path for appending and stdout returns the output
	// without a path: the real ones but in tests, which inject faults.
	openFile func(path string) (outputFile, error)
	stdout   func() io.Writer
}

// outputFile is what the sink needs of the file it appends to (*os.File).
type outputFile interface {
	io.Writer
	Sync() error
	Truncate(size int64) error
	Stat() (os.FileInfo, error)
	Close() error
}

func openAppend(path string) (outputFile, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
}

// Interface guards.
var _ pluginkit.Sink = (*Sink)(nil)

// New returns a stdout sink that logs through pluginkit.NewLogger.
func New() *Sink { return newSink(pluginkit.NewLogger()) }

func newSink(log *slog.Logger) *Sink {
	return &Sink{log: log, openFile: openAppend, stdout: func() io.Writer { return os.Stdout }}
}

// Info describes the sink.
func (s *Sink) Info() pluginkit.Info {
	return pluginkit.Info{
		Name:    "stdout",
		Version: pluginkit.BuildVersion(),
		Config: []pluginkit.ConfigField{{
			Name: "path",
			Type: pluginkit.TypeString,
			Doc:  "Append to this file and fsync once per batch instead of writing to walcast's stdout.",
		}},
		// Deliver holds one lock, writes and flushes (and with a file
		// fsyncs) once per batch, and a line writer has no per-request
		// cost of its own: larger batches only cut the per-batch work,
		// the gRPC call and the fsync. They cost no latency, since an
		// idle sink gets what is queued at once. A delivery block's
		// batch_size still wins.
		BatchSize: 1000,
	}
}

type config struct {
	Path string `json:"path"`
}

// Configure reads the optional path.
func (s *Sink) Configure(_ context.Context, raw json.RawMessage) error {
	var c config
	if err := pluginkit.DecodeConfig(raw, &c); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.path = c.Path
	return nil
}

// Open opens the file, or picks up stdout. os.Stdout is looked up here, not
// earlier: once pluginkit.Serve runs it is go-plugin's stream to the host's
// stdout, while before that it is the handshake channel.
func (s *Sink) Open(context.Context) (pluginkit.OpenResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.stdout()
	if s.path != "" {
		f, err := s.openFile(s.path)
		if err != nil {
			return pluginkit.OpenResult{}, fmt.Errorf("open output file: %w", err)
		}
		s.file, out = f, f
		// Only a regular file can be synced: fsync on a character device
		// or a pipe (path = "/dev/null", a FIFO) fails with EINVAL, and
		// there is nothing to make durable there.
		st, err := f.Stat()
		if err != nil {
			f.Close()
			s.file = nil
			return pluginkit.OpenResult{}, fmt.Errorf("open output file: %w", err)
		}
		s.sync = st.Mode().IsRegular()
	}
	s.w = bufio.NewWriterSize(out, 64<<10)
	s.log.Debug("stdout sink open", "path", s.path)
	return pluginkit.OpenResult{}, nil
}

// Deliver writes the batch and flushes it; with a file it also fsyncs, so
// that a successful Deliver means the lines are on disk.
func (s *Sink) Deliver(_ context.Context, events []pluginkit.Event) (pluginkit.DeliverResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.w == nil {
		return pluginkit.DeliverResult{}, pluginkit.Permanent(errors.New("deliver before open"))
	}
	for _, e := range events {
		s.w.Write(e.Payload)
		s.w.WriteByte('\n')
	}
	// bufio.Writer keeps its first error and Flush reports it.
	if err := s.w.Flush(); err != nil {
		s.w.Reset(s.out())
		return pluginkit.DeliverResult{}, fmt.Errorf("write batch: %w", err)
	}
	if s.file != nil && s.sync {
		if err := s.file.Sync(); err != nil {
			return pluginkit.DeliverResult{}, fmt.Errorf("fsync %s: %w", s.path, err)
		}
	}
	return pluginkit.DeliverResult{}, nil
}

// out is the writer under s.w; callers hold s.mu.
func (s *Sink) out() io.Writer {
	if s.file != nil {
		return s.file
	}
	return s.stdout()
}

// Close flushes what is buffered and closes the file.
func (s *Sink) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.w != nil {
		err = s.w.Flush()
		s.w = nil
	}
	if s.file != nil {
		err = errors.Join(err, s.file.Close())
		s.file = nil
	}
	if err != nil {
		return fmt.Errorf("close stdout sink: %w", err)
	}
	return nil
}
