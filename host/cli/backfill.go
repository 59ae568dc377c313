package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/config"
	"github.com/walcast/walcast/host/internal/source/backfill"
	"github.com/walcast/walcast/host/internal/source/capture"
	"github.com/walcast/walcast/pluginkit"
)

// listFlag collects a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func cmdBackfill(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("backfill", stderr)
	var names, sinks listFlag
	fs.Var(&names, "table", "SCHEMA.TABLE to backfill (repeatable, required)")
	fs.Var(&sinks, "sink", "only to this sink (repeatable; default every sink)")
	wait := fs.Bool("wait", false, "show progress until the backfills end, then wait as --until says")
	until := fs.String("until", untilAcknowledged, "with --wait, what to wait for: "+untilAcknowledged+" (every target sink acknowledged every row) or "+untilWritten+" (every row is in the WAL)")
	cancelFlag := fs.Bool("cancel", false, "cancel the running or queued backfills of the tables (for the sinks)")
	path, code, ok := parseArgs(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(names) == 0 {
		fmt.Fprintln(stderr, "walcast backfill: want at least one --table SCHEMA.TABLE")
		return 2
	}
	if *until != untilAcknowledged && *until != untilWritten {
		fmt.Fprintf(stderr, "walcast backfill: --until %q: want %s or %s\n", *until, untilAcknowledged, untilWritten)
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	t, ok := openTarget(ctx, path, stderr)
	if !ok {
		return 1
	}
	defer t.close()
	p, pool := t.p, t.db
	fail := func(err error) int {
		fmt.Fprintln(stderr, "walcast backfill:", err)
		return 1
	}
	tables, err := checkBackfill(ctx, pool, p, names, sinks)
	if err != nil {
		return fail(err)
	}
	if *cancelFlag {
		if err := cancelBackfills(ctx, t, tables, sinks, stdout); err != nil {
			return fail(err)
		}
		return 0
	}
	ids, err := backfill.Request(ctx, pool, p.Name, tables, sinks)
	if err != nil {
		return fail(err)
	}
	return queued(ctx, t, "backfill", ids, tables, sinks, *wait, *until, stdout, stderr)
}

// queued says what was queued (kind is backfill or resync) and, with
// wait, waits as until says.
func queued(ctx context.Context, t target, kind string, ids []int64, tables []backfill.Table, sinks []string, wait bool, until string, stdout, stderr io.Writer) int {
	p, pool := t.p, t.db
	running, err := slotActive(ctx, pool, p.Source.Slot)
	if err != nil {
		fmt.Fprintf(stderr, "walcast %s: %v\n", kind, err)
		return 1
	}
	for i, table := range tables {
		fmt.Fprintf(stdout, "%s %d of %s to %s queued\n", kind, ids[i], table, sinkList(sinks))
	}
	if !running {
		fmt.Fprintf(stdout, "no walcast run streams slot %s now: the %s starts with the next run\n", p.Source.Slot, kind)
	}
	if !wait {
		return 0
	}
	if code := waitBackfills(ctx, pool, ids, stdout); code != 0 || until == untilWritten {
		if code == 0 {
			fmt.Fprintln(stdout, "every row is written into the WAL; not waiting for the sinks to acknowledge them (--until "+untilWritten+")")
		}
		return code
	}
	return waitAcknowledged(ctx, pool, p, sinks, stdout)
}

// cancelBackfills cancels the running or queued backfills of tables (for
// sinks, every sink when empty) and says which.
func cancelBackfills(ctx context.Context, t target, tables []backfill.Table, sinks []string, out io.Writer) error {
	for _, table := range tables {
		ids, err := backfill.Cancel(ctx, t.db, t.p.Name, table, sinks)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			fmt.Fprintf(out, "%s: no backfill running or queued\n", table)
			continue
		}
		for _, id := range ids {
			fmt.Fprintf(out, "%s: cancelled backfill %d\n", table, id)
		}
	}
	return nil
}

// What walcast backfill --wait waits for.
const (
	untilAcknowledged = "acknowledged"
	untilWritten      = "written"
)

// waitAcknowledged waits, once the backfills are done, until every target
// sink has acknowledged their rows: until the slot that holds the sink's
// position (the pipeline's, or the sink's catch-up slot while it is
// detached) is confirmed past the WAL as it is now, which is past the
// last chunk. walcast confirms a position only once every durable sink
// resolved everything before it, and writes the checkpoints first, so
// each such sink's checkpoint then covers the last chunk too. A sink that
// is not durable acknowledges nothing: it is not waited for, and said so.
func waitAcknowledged(ctx context.Context, pool *pgxpool.Pool, p *config.Pipeline, sinks []string, out io.Writer) int {
	var endText string
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&endText); err != nil {
		fmt.Fprintln(out, "walcast backfill: read the WAL position:", err)
		return 1
	}
	end, _ := pluginkit.ParseLSN(endText)
	var durable []string
	for _, s := range p.Sinks {
		if len(sinks) > 0 && !slices.Contains(sinks, s.ID) {
			continue
		}
		if !s.Durable {
			fmt.Fprintf(out, "sink %s is not durable: it acknowledges nothing, so it is not waited for\n", s.ID)
			continue
		}
		durable = append(durable, s.ID)
	}
	fmt.Fprintf(out, "waiting for sink %s to acknowledge every row (the WAL up to %s)\n", strings.Join(durable, ", "), endText)
	last := time.Now()
	for _, sink := range durable {
		for {
			slot, confirmed, err := sinkSlotPosition(ctx, pool, p, sink)
			if err != nil {
				if ctx.Err() != nil {
					fmt.Fprintln(out, "stopped waiting; the rows are written and their delivery goes on (walcast status shows it)")
					return 1
				}
				fmt.Fprintln(out, "walcast backfill:", err)
				return 1
			}
			if confirmed >= end {
				fmt.Fprintf(out, "sink %s acknowledged every row: slot %s is confirmed to %s\n", sink, slot, pluginkit.FormatLSN(confirmed))
				break
			}
			if time.Since(last) >= 5*time.Second {
				last = time.Now()
				fmt.Fprintf(out, "sink %s: slot %s is confirmed to %s, waiting for %s\n", sink, slot, pluginkit.FormatLSN(confirmed), endText)
			}
			select {
			case <-ctx.Done():
				fmt.Fprintln(out, "stopped waiting; the rows are written and their delivery goes on (walcast status shows it)")
				return 1
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
	return 0
}

// sinkSlotPosition returns the slot that holds sink's position now (its
// catch-up slot while it is detached, else the pipeline's) and the slot's
// confirmed position (0 while it does not exist).
func sinkSlotPosition(ctx context.Context, pool *pgxpool.Pool, p *config.Pipeline, sink string) (string, uint64, error) {
	var slot string
	var confirmed *string
	err := pool.QueryRow(ctx, `
WITH s AS (SELECT coalesce((SELECT c.slot FROM walcast.catchup_slots c WHERE c.pipeline = $1 AND c.sink = $2), $3) AS slot)
SELECT s.slot, r.confirmed_flush_lsn::text FROM s LEFT JOIN pg_replication_slots r ON r.slot_name = s.slot`,
		p.Name, sink, p.Source.Slot).Scan(&slot, &confirmed)
	if err != nil {
		return "", 0, fmt.Errorf("read the position of sink %s: %w", sink, err)
	}
	if confirmed == nil {
		return slot, 0, nil
	}
	lsn, err := pluginkit.ParseLSN(*confirmed)
	if err != nil {
		return "", 0, fmt.Errorf("read the position of sink %s: %w", sink, err)
	}
	return slot, lsn, nil
}

func sinkList(sinks []string) string {
	if len(sinks) == 0 {
		return "every sink"
	}
	return "sink " + strings.Join(sinks, ", ")
}

// checkBackfill checks a request against the pipeline and the database:
// PostgreSQL 14+, known sinks, tables the pipeline captures, which exist
// and have a key.
func checkBackfill(ctx context.Context, pool *pgxpool.Pool, p *config.Pipeline, tables, sinks []string) ([]backfill.Table, error) {
	var version string
	if err := pool.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		return nil, fmt.Errorf("read server_version: %w", err)
	}
	if !capture.SupportsMessages(version) {
		return nil, fmt.Errorf("backfill needs PostgreSQL 14 or later (it streams rows as logical decoding messages through pgoutput); the source runs %s", version)
	}
	for _, s := range sinks {
		if !slices.ContainsFunc(p.Sinks, func(c config.Sink) bool { return c.ID == s }) {
			ids := make([]string, len(p.Sinks))
			for i := range p.Sinks {
				ids[i] = p.Sinks[i].ID
			}
			return nil, fmt.Errorf("pipeline %q has no sink %q (its sinks: %s)", p.Name, s, strings.Join(ids, ", "))
		}
	}
	out := make([]backfill.Table, 0, len(tables))
	for _, name := range tables {
		schema, table := backfill.SplitName(name)
		full := schema + "." + table
		if !slices.Contains(p.Source.Tables, full) {
			return nil, fmt.Errorf("table %s is not in the pipeline's source tables (%s): add it to tables in the source block first", full, strings.Join(p.Source.Tables, ", "))
		}
		t, err := backfill.Inspect(ctx, pool, full)
		if err == nil {
			err = t.Restrict(ctx, pool, p.Source.Publication)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// waitBackfills shows the progress of ids until each has ended: a bar
// redrawn in place on a terminal, a line every few seconds otherwise.
func waitBackfills(ctx context.Context, pool *pgxpool.Pool, ids []int64, out io.Writer) int {
	tty := isTerminal(out)
	every := 5 * time.Second
	if tty {
		every = 250 * time.Millisecond
	}
	type sample struct {
		rows int64
		at   time.Time
	}
	first := map[int64]sample{}
	code := 0
	for _, id := range ids {
		lastLine := time.Time{}
		for {
			b, err := backfill.Get(ctx, pool, id)
			if err != nil {
				if ctx.Err() != nil {
					fmt.Fprintln(out, "\nstopped waiting; the backfill goes on (walcast status shows it)")
					return 1
				}
				fmt.Fprintln(out, "walcast backfill:", err)
				return 1
			}
			now := time.Now()
			s, ok := first[id]
			if !ok || (b.State == backfill.StateQueued) {
				s = sample{rows: b.Rows, at: now}
				first[id] = s
			}
			rate := 0.0
			if d := now.Sub(s.at).Seconds(); d > 0.5 {
				rate = float64(b.Rows-s.rows) / d
			}
			if !b.Active() || tty || now.Sub(lastLine) >= every {
				lastLine = now
				line := progressLine(b, rate)
				if tty {
					fmt.Fprintf(out, "\r\033[K%s", line)
				} else {
					fmt.Fprintln(out, line)
				}
			}
			if !b.Active() {
				if tty {
					fmt.Fprintln(out)
				}
				if b.State != backfill.StateDone {
					code = 1
				}
				break
			}
			select {
			case <-ctx.Done():
				fmt.Fprintln(out, "\nstopped waiting; the backfill goes on (walcast status shows it)")
				return 1
			case <-time.After(min(every, 250*time.Millisecond)):
			}
		}
	}
	return code
}

// progressLine is one backfill's progress for humans.
func progressLine(b backfill.Backfill, rate float64) string {
	var sb strings.Builder
	kind := "backfill"
	if b.Resync {
		kind = "resync"
	}
	fmt.Fprintf(&sb, "%s %d %s: %s", kind, b.ID, b.Table, b.State)
	if b.State == backfill.StateFailed {
		fmt.Fprintf(&sb, " (%s)", b.Reason)
	}
	est := max(b.Estimate, b.Rows)
	if est > 0 {
		pct := float64(b.Rows) / float64(est)
		if b.State == backfill.StateDone {
			pct = 1
		}
		const width = 30
		n := int(pct * width)
		fmt.Fprintf(&sb, " [%s%s] %d/%d rows (%.0f%%)", strings.Repeat("#", n), strings.Repeat(".", width-n), b.Rows, est, 100*pct)
	} else {
		fmt.Fprintf(&sb, " %d rows", b.Rows)
	}
	if b.Active() && rate > 0 {
		fmt.Fprintf(&sb, ", %.0f rows/s", rate)
		if left := est - b.Rows; left > 0 {
			fmt.Fprintf(&sb, ", ETA %s", (time.Duration(float64(left)/rate) * time.Second).Round(time.Second))
		}
	}
	return sb.String()
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
