package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/walcast/walcast/host/internal/source/backfill"
)

// cmdResync re-reads tables through the backfill path, bracketed per
// table by resync_begin and resync_end events, so that a consumer (or a
// sink that sweeps) can remove the rows the source no longer has: what
// heals a destination after a gap (docs/backups.md).
func cmdResync(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("resync", stderr)
	var names, sinks listFlag
	fs.Var(&names, "table", "only this SCHEMA.TABLE (repeatable; default every table of the pipeline)")
	fs.Var(&sinks, "sink", "only to this sink (repeatable; default every sink)")
	wait := fs.Bool("wait", false, "show progress until the resyncs end, then wait as --until says")
	until := fs.String("until", untilAcknowledged, "with --wait, what to wait for: "+untilAcknowledged+" (every target sink acknowledged every row and marker) or "+untilWritten+" (every row is in the WAL)")
	cancelFlag := fs.Bool("cancel", false, "cancel the running or queued resyncs and backfills of the tables (for the sinks); no resync_end is written")
	path, code, ok := parseArgs(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if *until != untilAcknowledged && *until != untilWritten {
		fmt.Fprintf(stderr, "walcast resync: --until %q: want %s or %s\n", *until, untilAcknowledged, untilWritten)
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	t, ok := openTarget(ctx, path, stderr)
	if !ok {
		return 1
	}
	defer t.close()
	fail := func(err error) int {
		fmt.Fprintln(stderr, "walcast resync:", err)
		return 1
	}
	if len(names) == 0 {
		names = t.p.Source.Tables
	}
	tables, err := checkBackfill(ctx, t.db, t.p, names, sinks)
	if err != nil {
		return fail(err)
	}
	if *cancelFlag {
		if err := cancelBackfills(ctx, t, tables, sinks, stdout); err != nil {
			return fail(err)
		}
		return 0
	}
	ids, err := backfill.RequestResync(ctx, t.db, t.p.Name, tables, sinks)
	if err != nil {
		return fail(err)
	}
	return queued(ctx, t, "resync", ids, tables, sinks, *wait, *until, stdout, stderr)
}
