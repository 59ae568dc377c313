package cli

import (
	"context"
	"fmt"
	"io"
	"time"
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
		return "paused " + what + ": a running walcast starts no new deliveries for it (batches in flight finish).\n" +
			"Nothing is dropped: events wait in the replication slot, which retains WAL until you run walcast resume;\n" +
			"while a durable sink is paused the other sinks of the pipeline stop too once its queue is full.\n", nil
	default:
		return "resumed " + what + "\n", nil
	}
}
