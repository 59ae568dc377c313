package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/walcast/walcast/host/internal/delivery/isolate"
	"github.com/walcast/walcast/host/internal/ledger"
	"github.com/walcast/walcast/host/internal/source/capture"
)

func cmdTeardown(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("teardown", stderr)
	yes := fs.Bool("yes", false, "really drop the slot: undelivered changes are lost")
	force := fs.Bool("force", false, "tear down even though events are parked (they are deleted)")
	path, code, ok := parseArgs(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	p, ok := loadPipeline(path, stderr)
	if !ok {
		return 1
	}
	if !*yes {
		fmt.Fprintf(stderr, `walcast teardown would drop, for pipeline %q:
  - replication slot %q: every change not yet delivered to all sinks is lost for good,
    and changes made from now on are no longer captured;
  - publication %q, if walcast created it;
  - the pipeline's checkpoints, parked events and usage in the walcast schema.
Run again with --yes to do it.
`, p.Name, p.Source.Slot, p.Source.Publication)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t, err := dial(ctx, p)
	if err != nil {
		fmt.Fprintln(stderr, "walcast teardown:", err)
		return 1
	}
	defer t.close()
	n, err := t.parked.CountParked(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "walcast teardown:", err)
		return 1
	}
	if n > 0 && !*force {
		fmt.Fprintf(stderr, "walcast teardown: %d events of pipeline %q are parked (see walcast parked); replay them first, or run again with --force to delete them too\n", n, p.Name)
		return 1
	}
	if err := isolate.Teardown(ctx, t.db, p.Name, p.Source.Slot); err != nil {
		fmt.Fprintln(stderr, "walcast teardown:", err)
		return 1
	}
	if err := capture.Teardown(ctx, t.db, ledger.New(t.db, p.Name), p.Source.Slot, p.Source.Publication); err != nil {
		fmt.Fprintln(stderr, "walcast teardown:", err)
		return 1
	}
	fmt.Fprintf(stdout, "pipeline %q torn down: slot %q dropped, checkpoints removed\n", p.Name, p.Source.Slot)
	return 0
}
