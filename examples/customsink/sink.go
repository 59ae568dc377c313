package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

// Sink writes every batch atomically to <dir>/<first id>--<last id>.jsonl.
//
// A batch file appears complete or not at all (written under a temporary
// name, synced, renamed), so a crash never leaves half a batch behind, and
// a batch delivered again lands on the same name: the sink finds it and
// reports the events as duplicates instead of writing them twice. A replay
// of parked events is always written, to a file of its own. The host may
// form batches differently after a restart, so a reader of the directory
// still dedupes on each event's id, as every walcast consumer does.
type Sink struct {
	log *slog.Logger

	mu  sync.Mutex // guards cfg against a concurrent Configure
	cfg settings
}

// settings is the validated config.
type settings struct {
	dir   string
	fsync bool
}

// Interface guards.
var _ pluginkit.BatchSink = (*Sink)(nil)

// New returns a sink that logs through pluginkit.NewLogger, which reaches
// the host's log tagged with the sink's id.
func New() *Sink { return newSink(pluginkit.NewLogger()) }

func newSink(log *slog.Logger) *Sink { return &Sink{log: log} }

// Info describes the sink. The host reads it before Configure, to check the
// pipeline's config block (`walcast validate` does nothing else), so it
// must not depend on anything Configure or Open sets up.
func (s *Sink) Info() pluginkit.Info {
	return pluginkit.Info{
		Name:    "batchfiles",
		Version: pluginkit.BuildVersion(),
		Config: []pluginkit.ConfigField{
			{Name: "dir", Type: pluginkit.TypeString, Required: true,
				Doc: "Absolute path of the directory the batch files are written to; created when missing."},
			{Name: "fsync", Type: pluginkit.TypeBool,
				Doc: "Sync every file and the directory before acknowledging a batch. Default true; false trades durability across a machine crash for speed."},
		},
	}
}

type config struct {
	Dir   string `json:"dir"`
	Fsync *bool  `json:"fsync"`
}

// Configure validates the config. Every error names its attribute, so the
// host reports it at the right line of the pipeline file.
func (s *Sink) Configure(_ context.Context, setup pluginkit.Setup) error {
	var c config
	if err := pluginkit.DecodeConfig(setup.Config, &c); err != nil {
		return err
	}
	switch {
	case c.Dir == "":
		return &pluginkit.ConfigError{Field: "dir", Msg: "is required"}
	case !filepath.IsAbs(c.Dir):
		// Relative to what? The plugin runs in walcast's working
		// directory, which is rarely what the author of the file meant.
		return &pluginkit.ConfigError{Field: "dir", Msg: fmt.Sprintf("must be an absolute path, not %q", c.Dir)}
	}
	st := settings{dir: filepath.Clean(c.Dir), fsync: c.Fsync == nil || *c.Fsync}
	s.mu.Lock()
	s.cfg = st
	s.mu.Unlock()
	return nil
}

// Open creates the directory and checks that it can be written to, so that
// a wrong path fails at start-up rather than on the first change.
func (s *Sink) Open(context.Context) (pluginkit.OpenResult, error) {
	st := s.settings()
	if st.dir == "" {
		return pluginkit.OpenResult{}, pluginkit.Permanent(errors.New("open before configure"))
	}
	if err := os.MkdirAll(st.dir, 0o755); err != nil {
		return pluginkit.OpenResult{}, fmt.Errorf("create output directory: %w", err)
	}
	probe, err := os.CreateTemp(st.dir, ".probe-*")
	if err != nil {
		return pluginkit.OpenResult{}, fmt.Errorf("output directory is not writable: %w", err)
	}
	probe.Close()
	if err := os.Remove(probe.Name()); err != nil {
		return pluginkit.OpenResult{}, fmt.Errorf("remove write probe: %w", err)
	}
	s.log.Debug("batchfiles sink open", "dir", st.dir, "fsync", st.fsync)
	return pluginkit.OpenResult{}, nil
}

// Deliver writes the batch to its file. It may run concurrently for
// batches of different rows; each batch has its own file, so nothing is
// shared but the settings.
//
// Every failure is left retryable (the default): a full disk, a missing
// directory or a permission problem can all be fixed by an operator while
// the host backs off, and events that still fail are parked, not lost.
//
// A replay (b.Replay) holds parked events an operator asked for again:
// they must be written even if a file of the same range exists (a parked
// event's earlier attempt may have written it and still failed), so they
// go to a file of their own, <first>--<last>.r<time>.jsonl.
func (s *Sink) Deliver(ctx context.Context, b pluginkit.Batch) (pluginkit.DeliverResult, error) {
	events := b.Events
	if len(events) == 0 {
		return pluginkit.DeliverResult{}, nil
	}
	st := s.settings()
	if st.dir == "" {
		return pluginkit.DeliverResult{}, pluginkit.Permanent(errors.New("deliver before configure"))
	}
	// The host cancels a Deliver at the sink's deliver_timeout and retries
	// it; work started after that would only be thrown away.
	if err := ctx.Err(); err != nil {
		return pluginkit.DeliverResult{}, fmt.Errorf("deliver batch: %w", err)
	}

	name := filepath.Join(st.dir, fileName(events[0].ID, events[len(events)-1].ID))
	if b.Replay {
		name = replayName(name, time.Now())
	}
	switch _, err := os.Stat(name); {
	case err == nil && !b.Replay:
		// Renamed into place only when complete: this batch was delivered
		// before, and the host did not get the answer.
		return pluginkit.DeliverResult{Duplicates: len(events)}, nil
	case !errors.Is(err, fs.ErrNotExist):
		return pluginkit.DeliverResult{}, fmt.Errorf("check for an earlier delivery: %w", err)
	}

	if err := writeAtomically(ctx, name, events, st.fsync); err != nil {
		return pluginkit.DeliverResult{}, fmt.Errorf("deliver batch %s..%s: %w", events[0].ID, events[len(events)-1].ID, err)
	}
	return pluginkit.DeliverResult{}, nil
}

// writeAtomically writes the payloads, one per line, to a temporary file
// next to name and renames it to name once complete (and synced, when
// fsync is set). ctx is checked before the rename: a Deliver that was
// given up on must not become visible as a success.
func writeAtomically(ctx context.Context, name string, events []pluginkit.Event, fsync bool) (err error) {
	dir := filepath.Dir(name)
	f, err := os.CreateTemp(dir, ".batch-*")
	if err != nil {
		return fmt.Errorf("create temporary file: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()

	var b strings.Builder
	for _, e := range events {
		b.Write(e.Payload)
		b.WriteByte('\n')
	}
	if _, err := f.WriteString(b.String()); err != nil {
		return fmt.Errorf("write %s: %w", f.Name(), err)
	}
	if fsync {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", f.Name(), err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", f.Name(), err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), name); err != nil {
		return fmt.Errorf("rename into place: %w", err)
	}
	if fsync {
		// The rename itself is durable only once the directory is synced.
		if err := syncDir(dir); err != nil {
			return err
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory to sync it: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// Close has nothing to release: every Deliver closes its own file.
func (s *Sink) Close(context.Context) error { return nil }

func (s *Sink) settings() settings {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

// fileName names the file of the batch from first to last. Ids are written
// as zero-padded hex, so that `ls` lists the files in id order: the ids'
// own string form does not sort that way ("0/A:0" > "0/1A:0" as strings).
func fileName(first, last pluginkit.EventID) string {
	return fmt.Sprintf("%016X.%016X--%016X.%016X.jsonl", first.CommitLSN, first.Index, last.CommitLSN, last.Index)
}

// replayName is the name of a replay's file: the batch's name marked with
// when it was written, so that it sorts right after the batch's first
// file and never replaces it.
func replayName(name string, at time.Time) string {
	base, _ := strings.CutSuffix(name, ".jsonl")
	return fmt.Sprintf("%s.r%016X.jsonl", base, at.UnixNano())
}

// parseFileName returns the first and last id of a batch file's name, as
// fileName (or replayName) wrote it.
func parseFileName(name string) (first, last pluginkit.EventID, err error) {
	base, ok := strings.CutSuffix(filepath.Base(name), ".jsonl")
	if ok {
		_, err = fmt.Sscanf(base, "%016X.%016X--%016X.%016X", &first.CommitLSN, &first.Index, &last.CommitLSN, &last.Index)
	}
	plain := fileName(first, last)
	if !ok || err != nil || (plain != filepath.Base(name) && !isReplayOf(filepath.Base(name), plain)) {
		return first, last, fmt.Errorf("%q is not a batch file name", name)
	}
	return first, last, nil
}

// isReplayOf reports whether name is a replay's file of the batch named
// plain.
func isReplayOf(name, plain string) bool {
	var at uint64
	base, _ := strings.CutSuffix(plain, ".jsonl")
	rest, ok := strings.CutPrefix(name, base+".r")
	if !ok {
		return false
	}
	_, err := fmt.Sscanf(rest, "%016X.jsonl", &at)
	return err == nil && replayName(plain, time.Unix(0, int64(at))) == name
}
