package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/config"
	"github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/daemon"
	"github.com/walcast/walcast/host/internal/delivery/schedule"
	"github.com/walcast/walcast/pluginkit"
)

func cmdParked(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("parked", stderr)
	sink := fs.String("sink", "", "only this sink's parked events")
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
	ps, err := t.parked.ListParked(ctx, *sink, "")
	if err != nil {
		fmt.Fprintln(stderr, "walcast parked:", err)
		return 1
	}
	if len(ps) == 0 {
		fmt.Fprintln(stdout, "no parked events")
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SINK\tID\tTABLE\tOP\tKEY\tATTEMPTS\tLAST FAILURE\tLAST ERROR")
	for _, p := range ps {
		msg := strings.ReplaceAll(p.LastError, "\n", " ")
		if len(msg) > 120 {
			msg = msg[:117] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s.%s\t%s\t%s\t%d\t%s\t%s\n", p.Sink, p.Event.ID, p.Event.Schema, p.Event.Table, p.Event.Op,
			p.Event.Key, p.Attempts, p.LastFailure.UTC().Format(time.RFC3339), msg)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "%d parked events\n", len(ps))
	return 0
}

func cmdReplay(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("replay", stderr)
	sinkID := fs.String("sink", "", "the sink whose parked events to deliver again (required)")
	all := fs.Bool("all", false, "replay every parked event of the sink")
	idFlag := fs.String("id", "", "replay the row of this parked event, oldest parked event first")
	wait := fs.Duration("wait", 60*time.Second, "how long to wait for the replayed events to leave walcast.parked (0: do not wait for a daemon; replaying directly, wait until the replay ends)")
	pluginDir := fs.String("plugin-dir", "", "directory holding walcast-sink-* plugins (direct replay)")
	path, code, ok := parseArgs(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if *sinkID == "" || *all == (*idFlag != "") {
		fmt.Fprintln(stderr, "walcast replay: want --sink ID and exactly one of --all or --id EVENT_ID")
		return 2
	}
	var req parking.ReplayRequest
	req.Sink = *sinkID
	if *idFlag != "" {
		id, err := pluginkit.ParseEventID(*idFlag)
		if err != nil {
			fmt.Fprintln(stderr, "walcast replay:", err)
			return 2
		}
		req.ID = id
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	t, ok := openTarget(ctx, path, stderr)
	if !ok {
		return 1
	}
	defer t.close()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	err := replayParked(ctx, t, req, *wait, *pluginDir, log, stdout, stderr)
	switch {
	case errors.Is(err, errStillParked):
		return 1 // each failure has been reported
	case err != nil:
		fmt.Fprintln(stderr, "walcast replay:", err)
		return 1
	}
	return 0
}

// errStillParked says that a direct replay left rows parked; each failure
// was written out as it happened.
var errStillParked = errors.New("rows still parked")

// replayParked delivers parked events of req.Sink again (req.ID's row, or
// all of them), as `walcast replay` and the console's replay buttons do:
// through the running daemon when one streams the slot (then it waits up
// to wait for the events to leave walcast.parked), else directly with the
// sink's plugin from pluginDir. Progress goes to out, the failures of a
// direct replay to errOut.
func replayParked(ctx context.Context, t target, req parking.ReplayRequest, wait time.Duration,
	pluginDir string, log *slog.Logger, out, errOut io.Writer) error {
	p, store := t.p, t.parked
	var sink *config.Sink
	for i := range p.Sinks {
		if p.Sinks[i].ID == req.Sink {
			sink = &p.Sinks[i]
		}
	}
	if sink == nil {
		return fmt.Errorf("pipeline %q has no sink %q", p.Name, req.Sink)
	}
	// What the replay covers: with --id, the event's row and every parked
	// event that must go before it (the scheduler loads the same set).
	before, err := schedule.ReplaySet(ctx, store, req.Sink, req.ID)
	if err != nil {
		return err
	}
	if before == nil && !req.ID.IsZero() {
		return fmt.Errorf("event %s is not parked for sink %s (see walcast parked)", req.ID, req.Sink)
	}
	if len(before) == 0 {
		fmt.Fprintln(out, "nothing parked to replay")
		return nil
	}
	running, err := slotActive(ctx, t.db, p.Source.Slot)
	if err != nil {
		return err
	}
	if !running {
		return replayDirect(ctx, p, sink, store, req, before, wait, pluginDir, log, out, errOut)
	}
	// The daemon owns delivery: hand it the request, so the replayed
	// events and the live ones of the same rows stay in order.
	if err := store.RequestReplay(ctx, req); err != nil {
		return err
	}
	fmt.Fprintf(out, "asked the running daemon to replay %d parked events of sink %s\n", len(before), req.Sink)
	if wait == 0 {
		return nil
	}
	deadline := time.Now().Add(wait)
	for {
		left, err := store.ListParked(ctx, req.Sink, "")
		if err != nil {
			return err
		}
		if !stillParked(before, left) {
			fmt.Fprintf(out, "replayed %d events; walcast.parked holds %d for sink %s\n", len(before), len(left), req.Sink)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s %d events of sink %s are still parked; the daemon keeps trying (see walcast parked)", wait, len(left), req.Sink)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// stillParked reports whether any of the events asked for is still parked.
func stillParked(asked, left []parking.Event) bool {
	ids := map[pluginkit.EventID]bool{}
	for _, p := range asked {
		ids[p.Event.ID] = true
	}
	for _, p := range left {
		if ids[p.Event.ID] {
			return true
		}
	}
	return false
}

// replayDirect delivers parked events itself when no daemon runs, through
// the scheduler the daemon replays with (schedule.ReplayParked): the sink's
// batching, rate limit, row order, retries and parking again all apply. It
// stops after wait (0: when the replay ends); what is left stays parked.
func replayDirect(ctx context.Context, p *config.Pipeline, sink *config.Sink, store *parking.Store, req parking.ReplayRequest,
	before []parking.Event, wait time.Duration, pluginDir string, log *slog.Logger, stdout, stderr io.Writer) error {
	ps := newPluginSet(pluginDir, log, stdout)
	ps.Pipeline = p.Name
	ps.Source = &p.Source
	plugin, _, err := ps.Launch(ctx, sink)
	if err != nil {
		return err
	}
	defer plugin.Close(context.WithoutCancel(ctx))
	cfg := daemon.ScheduleConfig(sink, plugin.Info())
	cfg.Parked = store
	cfg.Logger = log
	rctx := ctx
	if wait > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	delivered, err := schedule.ReplayParked(rctx, cfg, plugin, req)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintln(stderr, "walcast replay:", err)
	}
	left, lerr := store.ListParked(ctx, req.Sink, "")
	if lerr != nil {
		return lerr
	}
	still := 0
	for _, pe := range left {
		if !stillParked([]parking.Event{pe}, before) {
			continue // parked since, not asked for
		}
		still++
	}
	fmt.Fprintf(stdout, "replayed directly (no daemon running): %d delivered, %d still parked\n", delivered, still)
	if still > 0 {
		fmt.Fprintf(stderr, "walcast replay: %d events of sink %s are still parked (see walcast parked for why)\n", still, req.Sink)
		return errStillParked
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return errStillParked // reported above
	}
	return nil
}

// slotActive reports whether a walsender streams from the slot, i.e.
// whether a daemon runs the pipeline.
func slotActive(ctx context.Context, db control.Querier, slot string) (bool, error) {
	var active bool
	err := db.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up slot %s: %w", slot, err)
	}
	return active, nil
}
