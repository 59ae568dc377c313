package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/walcast/walcast/pluginkit"
)

// Sink writes JSON lines, one envelope per line, written (and with a file
// fsynced) once per batch. A batch that fails is never left behind half
// written where that can be helped, see Deliver.
type Sink struct {
	log *slog.Logger

	mu     sync.Mutex // serialises batches so lines never interleave
	path   string     // empty: walcast's stdout
	opened bool       // between Open and Close

	// file is path's file; nil after a failed batch until the next
	// Deliver opens it again. regular is false for a FIFO or a device,
	// which can be neither truncated nor fsynced.
	file    outputFile
	regular bool
	// cut, when not -1, is the size the file must be cut back to before
	// anything is written to it: a failed batch that could not be taken
	// back out at once.
	cut int64
	// torn says a stream (stdout, a FIFO, a device) ends in part of a
	// line a failed write put out; the next batch starts with a newline.
	torn bool
	w    *bufio.Writer // reused by every batch, Reset onto the output

	// openFile opens path for appending and stdout returns the output
	// without a path: the real ones but in tests, which inject faults.
	openFile func(path string) (outputFile, error)
	stdout   func() io.Writer
}

// Interface guards.
var _ pluginkit.Sink = (*Sink)(nil)

// New returns a stdout sink that logs through pluginkit.NewLogger.
func New() *Sink { return newSink(pluginkit.NewLogger()) }

func newSink(log *slog.Logger) *Sink {
	return &Sink{log: log, cut: -1, openFile: openAppend, stdout: walcastStdout}
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

// Open opens the file, cutting back an incomplete last line (see
// openPath). Without a path nothing is opened: walcast's stdout is looked
// up at the first write (walcastStdout).
func (s *Sink) Open(context.Context) (pluginkit.OpenResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.path != "" && s.file == nil {
		if err := s.openPath(); err != nil {
			return pluginkit.OpenResult{}, err
		}
	}
	if s.w == nil {
		s.w = bufio.NewWriterSize(io.Discard, 64<<10)
	}
	s.opened = true
	s.log.Debug("stdout sink open", "path", s.path)
	return pluginkit.OpenResult{}, nil
}

// Deliver writes the batch; with a regular file it also fsyncs, so that a
// successful Deliver means the lines are on disk. A batch that fails is
// not acknowledged, and:
//   - in a regular file it is taken back out (the file is truncated to
//     where it ended before the batch) and the descriptor is closed, so
//     the file never holds half an envelope for the next batch to be
//     glued to, and a failed fsync is never retried on the descriptor
//     that reported it;
//   - in a stream (walcast's stdout, a FIFO, a device), which cannot take
//     back what it put out, a partial line is ended with a newline before
//     the next batch, so that no event is written inside it.
func (s *Sink) Deliver(_ context.Context, events []pluginkit.Event) (pluginkit.DeliverResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.opened {
		return pluginkit.DeliverResult{}, pluginkit.Permanent(errors.New("deliver before open"))
	}
	if s.path != "" && s.file == nil {
		if err := s.openPath(); err != nil {
			return pluginkit.DeliverResult{}, pluginkit.Retryable(fmt.Errorf("reopen after a failed batch: %w", err))
		}
	}
	var err error
	if s.file != nil && s.regular {
		err = s.appendFile(events)
	} else {
		err = s.writeStream(events)
	}
	if err != nil {
		return pluginkit.DeliverResult{}, pluginkit.Retryable(err)
	}
	return pluginkit.DeliverResult{}, nil
}

// writeBatch writes the events as lines to out through s.w.
func (s *Sink) writeBatch(out io.Writer, events []pluginkit.Event) error {
	s.w.Reset(out)
	for _, e := range events {
		s.w.Write(e.Payload)
		s.w.WriteByte('\n')
	}
	// bufio.Writer keeps its first error and Flush reports it.
	err := s.w.Flush()
	s.w.Reset(io.Discard) // drops what a failed Flush still holds
	return err
}

// Close closes the file. Nothing is buffered between batches.
func (s *Sink) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opened = false
	if s.file == nil {
		return nil
	}
	err := s.file.Close()
	s.file = nil
	if err != nil {
		return fmt.Errorf("close %s: %w", s.path, err)
	}
	return nil
}
