package cli

import (
	"context"
	"flag"
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
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	sinkID := fs.String("sink", "", "only this sink (default: the whole pipeline)")
	path, ok := parseArgs(fs, args, stderr)
	if !ok {
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, store, pool, ok := openStore(ctx, path, stderr)
	if !ok {
		return 1
	}
	defer pool.Close()
	what := "pipeline " + p.Name
	if *sinkID != "" {
		found := false
		for _, s := range p.Sinks {
			found = found || s.ID == *sinkID
		}
		if !found {
			fmt.Fprintf(stderr, "walcast %s: pipeline %q has no sink %q\n", name, p.Name, *sinkID)
			return 1
		}
		what = "sink " + *sinkID + " of pipeline " + p.Name
	}
	if !paused && *sinkID != "" {
		if pauses, err := store.LoadPauses(ctx); err == nil && !pauses.Pipeline.IsZero() {
			fmt.Fprintf(stderr, "walcast resume: the whole pipeline %s is paused; resume it without --sink\n", p.Name)
			return 1
		}
	}
	changed, err := store.SetPaused(ctx, *sinkID, paused)
	if err != nil {
		fmt.Fprintf(stderr, "walcast %s: %v\n", name, err)
		return 1
	}
	switch {
	case !changed && paused:
		fmt.Fprintf(stdout, "%s was already paused\n", what)
	case !changed:
		fmt.Fprintf(stdout, "%s was not paused\n", what)
	case paused:
		fmt.Fprintf(stdout, "paused %s: a running walcast starts no new deliveries for it (batches in flight finish).\n", what)
		fmt.Fprintln(stdout, "Nothing is dropped: events wait in the replication slot, which retains WAL until you run walcast resume;")
		fmt.Fprintln(stdout, "while a durable sink is paused the other sinks of the pipeline stop too once its queue is full.")
	default:
		fmt.Fprintf(stdout, "resumed %s\n", what)
	}
	return 0
}
