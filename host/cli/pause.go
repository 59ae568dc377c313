package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/walcast/walcast/host/internal/config"
)

// cmdPause and cmdResume record an operator pause in walcast.pauses and
// wake the running daemon (if any) to apply it; a daemon started later
// starts paused. Pausing holds events, it never drops them: they wait in
// the slot, which retains WAL until the sink resumes.
func cmdPause(args []string, stdout, stderr io.Writer) int {
	return setPaused("pause", true, args, stdout, stderr)
}

func cmdResume(args []string, stdout, stderr io.Writer) int {
	return setPaused("resume", false, args, stdout, stderr)
}

func setPaused(name string, paused bool, args []string, stdout, stderr io.Writer) int {
	fs := newFlags(name, stderr)
	sinkID := fs.String("sink", "", "only this sink (default: the whole pipeline)")
	path, code, ok := parseArgs(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t, ok := openTarget(ctx, path, stderr)
	if !ok {
		return 1
	}
	defer t.close()
	msg, err := applyPause(ctx, t, *sinkID, paused)
	if err != nil {
		fmt.Fprintf(stderr, "walcast %s: %v\n", name, err)
		return 1
	}
	fmt.Fprint(stdout, msg)
	return 0
}

// applyPause pauses or resumes one sink of t (the whole pipeline when
// sinkID is empty), as `walcast pause`/`resume` and the console's buttons
// do, and returns what it did in words, one or more lines.
func applyPause(ctx context.Context, t target, sinkID string, paused bool) (string, error) {
	p, store := t.p, t.pauses
	what := "pipeline " + p.Name
	if sinkID != "" {
		found := false
		for _, s := range p.Sinks {
			found = found || s.ID == sinkID
		}
		if !found {
			return "", fmt.Errorf("pipeline %q has no sink %q", p.Name, sinkID)
		}
		what = "sink " + sinkID + " of pipeline " + p.Name
	}
	if !paused && sinkID != "" {
		if state, err := store.LoadPauses(ctx); err == nil && !state.Pipeline.IsZero() {
			return "", fmt.Errorf("the whole pipeline %s is paused; resume it without --sink", p.Name)
		}
	}
	changed, err := store.SetPaused(ctx, sinkID, paused)
	if err != nil {
		return "", err
	}
	switch {
	case !changed && paused:
		return what + " was already paused\n", nil
	case !changed:
		return what + " was not paused\n", nil
	case paused:
		return "paused " + what + ": " + pauseEffect(p, sinkID) + "\n", nil
	default:
		return "resumed " + what + ": a running walcast delivers what was held, in per-row order\n", nil
	}
}

// pauseEffect says what a pause does to the pipeline, as walcast run
// applies it (docs/slow-sinks.md): the paused sink stops,
// the others do not.
func pauseEffect(p *config.Pipeline, sinkID string) string {
	const start = "a running walcast starts no new deliveries to "
	if sinkID == "" {
		return start + "any of its sinks (batches in flight finish). Nothing is dropped: the changes wait in replication slot " +
			p.Source.Slot + ", which retains WAL until walcast resume."
	}
	var s config.Sink
	for _, x := range p.Sinks {
		if x.ID == sinkID {
			s = x
		}
	}
	switch {
	case !s.Durable:
		return start + "it (batches in flight finish); the other sinks go on. It is not durable: what it misses while its queue is full is dropped for it, never held in the slot."
	case len(p.Sinks) == 1:
		return start + "it (batches in flight finish). It is the pipeline's only sink: its changes wait in replication slot " +
			p.Source.Slot + ", which retains WAL until walcast resume."
	}
	return start + "it (batches in flight finish); the other sinks go on. It is detached onto a catch-up slot of its own, " +
		"which keeps its changes (and retains WAL) until walcast resume; it then catches up and rejoins the live stream."
}
