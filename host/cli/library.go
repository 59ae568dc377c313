package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/walcast/walcast/host"
	"github.com/walcast/walcast/host/internal/config"
	"github.com/walcast/walcast/host/internal/pg"
)

// libraryCommands act on library-mode streams (host.Open), which have no
// pipeline file: they are named by their slot.
func libraryCommands() []command {
	return []command{
		{name: "library retire", args: "SLOT", summary: "drop a library stream's slot, publications and walcast rows",
			details: "Retires a library-mode stream (host.Open) for good, as host.Retire does: drops its replication\n" +
				"slot, the publications Open created for it (not one it found) and its rows in the walcast\n" +
				"schema (pipeline library:SLOT). Without --yes it only says what it would drop. Undelivered\n" +
				"changes are lost. The dsn comes from --dsn, else $WALCAST_SOURCE_DSN.",
			example: "library retire orders_indexer --yes",
			run:     cmdLibraryRetire},
	}
}

func cmdLibraryRetire(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("library retire", stderr)
	dsn := fs.String("dsn", "", "the source database (default $WALCAST_SOURCE_DSN, which keeps the password off the command line)")
	pub := fs.String("publication", "", "the stream's StreamConfig.Publication, when Open was given one (default: the slot's name)")
	yes := fs.Bool("yes", false, "really drop the slot: undelivered changes are lost")
	pos, code, ok := parsePositionals(fs, args, stdout, stderr, "SLOT")
	if !ok {
		return code
	}
	slot := pos[0]
	cfg := host.StreamConfig{DSN: *dsn, Slot: slot, Publication: *pub}
	if cfg.DSN == "" {
		cfg.DSN = os.Getenv("WALCAST_SOURCE_DSN")
	}
	if cfg.Publication == "" {
		cfg.Publication = slot
	}
	if problem := pg.SlotProblem(slot); problem != "" {
		fmt.Fprintf(stderr, "walcast library retire: slot %q %s\n", slot, problem)
		return 2
	}
	if cfg.DSN == "" {
		fmt.Fprintln(stderr, "walcast library retire: no dsn: pass --dsn or set WALCAST_SOURCE_DSN")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := &config.Pipeline{Name: host.LibraryPipeline(slot), Source: config.Source{DSN: cfg.DSN, Slot: slot, Publication: cfg.Publication}}
	t, err := dial(ctx, p)
	if err != nil {
		fmt.Fprintln(stderr, "walcast library retire:", err)
		return 1
	}
	defer t.close()
	v, err := viewTeardown(ctx, t, nil)
	if err != nil {
		fmt.Fprintln(stderr, "walcast library retire:", err)
		return 1
	}
	v.cmd, v.what = "walcast library retire", fmt.Sprintf("library stream on slot %q (pipeline %q)", slot, p.Name)
	if !*yes {
		v.writeDryRun(stderr)
		return 1
	}
	r, err := host.Retire(ctx, cfg)
	done := retiredText(r)
	if err != nil {
		if errors.Is(err, host.ErrSlotInUse) {
			err = errors.New(v.inUse())
		}
		fmt.Fprintln(stderr, "walcast library retire:", err)
		return 1
	}
	if r.Recorded || v.marks > 0 {
		done = append(done, fmt.Sprintf("deleted the stream's rows in the walcast schema (%d checkpoint(s))", v.marks))
	}
	v.writeDone(stdout, done)
	return 0
}

// retiredText is what host.Retire did, in words.
func retiredText(r host.Retired) []string {
	var done []string
	if r.Slot != "" {
		done = append(done, fmt.Sprintf("dropped replication slot %q", r.Slot))
	}
	for _, pub := range r.Publications {
		done = append(done, fmt.Sprintf("dropped publication %q", pub))
	}
	return done
}
