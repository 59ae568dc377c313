package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/config"
	"github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/host/internal/control/checkpoints"
	"github.com/walcast/walcast/host/internal/control/leader"
	"github.com/walcast/walcast/host/internal/delivery/isolate"
	"github.com/walcast/walcast/host/internal/ledger"
	"github.com/walcast/walcast/host/internal/source/capture"
)

// cmdTeardown removes what a pipeline left in the source database. It
// first reads what is there (teardownView), so that the dry run lists
// exactly what --yes drops and what it leaves, and the report after --yes
// says only what it did.
func cmdTeardown(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("teardown", stderr)
	yes := fs.Bool("yes", false, "really drop the slot: undelivered changes are lost")
	force := fs.Bool("force", false, "tear down even though events are parked (they are deleted)")
	pluginDir := fs.String("plugin-dir", "", "directory holding walcast-sink-* plugins (to name a kafka sink's topics, which teardown leaves)")
	path, code, ok := parseArgs(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	p, ok := loadPipeline(path, stderr)
	if !ok {
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
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	v, err := viewTeardown(ctx, t, newPluginSet(*pluginDir, log, io.Discard))
	if err != nil {
		fmt.Fprintln(stderr, "walcast teardown:", err)
		return 1
	}
	if !*yes {
		v.writeDryRun(stderr)
		return 1
	}
	if v.parked > 0 && !*force {
		fmt.Fprintf(stderr, "walcast teardown: %d events of pipeline %q are parked (see walcast parked); replay them first, or run again with --force to delete them too\n", v.parked, p.Name)
		return 1
	}
	if v.activePID != 0 {
		fmt.Fprintln(stderr, "walcast teardown:", v.inUse())
		return 1
	}
	done, err := v.apply(ctx, t)
	if err != nil {
		fmt.Fprintln(stderr, "walcast teardown:", err)
		if len(done) > 0 {
			fmt.Fprintf(stderr, "before that it %s\n", strings.Join(done, "; "))
		}
		return 1
	}
	v.writeDone(stdout, done)
	return 0
}

// teardownView is what a pipeline has in the source database, read before
// a teardown: what --yes drops, and what it leaves.
type teardownView struct {
	p *config.Pipeline
	// cmd and what name the command and what it acts on in what it
	// prints: "walcast teardown", "pipeline \"shop\"".
	cmd, what string
	// slot exists; activePID is its walsender (0: not in use), holder the
	// walcast run that leads the pipeline, if any.
	slot      bool
	confirmed string
	activePID int
	holder    *leader.Holder
	catchups  []string // catch-up slots of detached sinks that exist
	// pubs are the publications walcast created that exist; foreign the
	// pipeline's publication when walcast did not create it.
	pubs    []string
	foreign string
	record  bool
	schema  bool // the walcast schema exists
	marks   int  // checkpoints
	parked  int
	kafka   []string // what each kafka sink wrote, which teardown leaves
	// trigger: the pipeline's ddl_events event trigger exists.
	trigger bool
}

// viewTeardown reads t's pipeline's objects without changing anything
// (the walcast schema is not created when missing).
func viewTeardown(ctx context.Context, t target, plugins config.PluginChecker) (teardownView, error) {
	p := t.p
	v := teardownView{p: p, cmd: "walcast teardown", what: fmt.Sprintf("pipeline %q", p.Name)}
	var pid *int32
	err := t.db.QueryRow(ctx, `SELECT active_pid, coalesce(confirmed_flush_lsn::text, '') FROM pg_replication_slots WHERE slot_name = $1`, p.Source.Slot).Scan(&pid, &v.confirmed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return v, fmt.Errorf("look up replication slot %s: %w", p.Source.Slot, err)
	default:
		v.slot = true
		if pid != nil {
			v.activePID = int(*pid)
		}
	}
	if h, leads, err := leader.Current(ctx, t.db, p.Name); err == nil && leads {
		v.holder = &h
	}
	if v.catchups, err = existingCatchups(ctx, t.db, p.Source.Slot); err != nil {
		return v, err
	}
	if err := v.readRecord(ctx, t); err != nil {
		return v, err
	}
	if err := t.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = $1)`, capture.DDLTrigger(p.Name)).Scan(&v.trigger); err != nil {
		return v, fmt.Errorf("look up event trigger %s: %w", capture.DDLTrigger(p.Name), err)
	}
	for i := range p.Sinks {
		if s := &p.Sinks[i]; s.Type == "kafka" {
			topics, err := topicsOf(ctx, p, s, plugins)
			what := fmt.Sprintf("the Kafka topics of sink %s: %s", s.ID, topics)
			if err != nil {
				what = fmt.Sprintf("the Kafka topics of sink %s (not named here: %v)", s.ID, err)
			}
			v.kafka = append(v.kafka, what)
		}
	}
	return v, nil
}

// readRecord reads the pipeline's record, publications and rows.
func (v *teardownView) readRecord(ctx context.Context, t target) error {
	rec, known, err := ledger.New(t.db, v.p.Name).LoadRecord(ctx)
	if err != nil {
		return err
	}
	v.record = known
	if err := t.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'walcast')`).Scan(&v.schema); err != nil {
		return fmt.Errorf("look up schema walcast: %w", err)
	}
	if known && rec.CreatedPublication {
		for _, pub := range []string{rec.Publication, capture.KeylessPublication(rec.Publication)} {
			var exists bool
			if err := t.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, pub).Scan(&exists); err != nil {
				return fmt.Errorf("look up publication %s: %w", pub, err)
			}
			if exists {
				v.pubs = append(v.pubs, pub)
			}
		}
	} else {
		var exists bool
		if err := t.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, v.p.Source.Publication).Scan(&exists); err != nil {
			return fmt.Errorf("look up publication %s: %w", v.p.Source.Publication, err)
		}
		if exists {
			v.foreign = v.p.Source.Publication
		}
	}
	marks, err := checkpoints.New(t.db, v.p.Name).Load(ctx)
	if err != nil && !control.NoSchema(err) {
		return err
	}
	v.marks = len(marks)
	if v.parked, err = t.parked.CountParked(ctx); err != nil && !control.NoSchema(err) {
		return err
	}
	return nil
}

// existingCatchups lists the catch-up slots of the pipeline whose slot is
// main that exist (isolate names them after main).
func existingCatchups(ctx context.Context, db control.Querier, main string) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT slot_name::text FROM pg_replication_slots WHERE database = current_database() ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("list replication slots: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list replication slots: %w", err)
	}
	var out []string
	for _, n := range names {
		if isolate.IsCatchupSlot(main, n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// inUse says who holds the slot: the walcast run leading the pipeline
// (its own pid, in its name), not only the server process streaming to
// it.
func (v teardownView) inUse() string {
	slot := v.p.Source.Slot
	if v.holder != nil {
		return fmt.Sprintf("replication slot %q is in use by %s, which leads pipeline %q (its walsender is server process %d): stop that walcast run first (Ctrl-C or SIGTERM), then run walcast teardown again",
			slot, v.holder.Name, v.p.Name, v.activePID)
	}
	return fmt.Sprintf("replication slot %q is in use by server process %d, and no walcast run leads pipeline %q: a library stream or another client streams from it (see pg_stat_replication); stop it first (a library stream: Stream.Close)",
		slot, v.activePID, v.p.Name)
}

// writeDryRun lists what --yes would drop and what it would leave.
func (v teardownView) writeDryRun(w io.Writer) {
	fmt.Fprintf(w, "%s would drop, for %s:\n", v.cmd, v.what)
	drops := 0
	item := func(format string, args ...any) {
		drops++
		fmt.Fprintf(w, "  - "+format+"\n", args...)
	}
	if v.slot {
		item("replication slot %q (confirmed up to %s): every change not yet delivered to all sinks is lost for good,\n    and changes made from now on are no longer captured", v.p.Source.Slot, v.confirmed)
	}
	for _, s := range v.catchups {
		item("catch-up slot %q of a sink detached from the live stream, and the changes it holds for that sink", s)
	}
	for _, pub := range v.pubs {
		item("publication %q (walcast created it)", pub)
	}
	if v.trigger {
		item("event trigger %q and its function (ddl_events)", capture.DDLTrigger(v.p.Name))
	}
	if v.record || v.marks > 0 || v.parked > 0 {
		item("the pipeline's rows in the walcast schema: %d checkpoint(s), %d parked event(s), its usage, pauses, gaps and backfills", v.marks, v.parked)
	}
	if drops == 0 {
		fmt.Fprintln(w, "  nothing: it has no slot, publication or rows in this database")
	}
	v.writeLeft(w, "It would leave")
	if v.activePID != 0 {
		fmt.Fprintf(w, "It would refuse now: %s.\n", v.inUse())
	}
	if drops > 0 {
		fmt.Fprintln(w, "Run again with --yes to do it.")
	}
}

// writeLeft lists what a teardown does not remove.
func (v teardownView) writeLeft(w io.Writer, intro string) {
	var left []string
	if v.schema {
		left = append(left, "the walcast schema itself (other pipelines may use it)")
	}
	if v.foreign != "" {
		left = append(left, fmt.Sprintf("publication %q, which walcast did not create", v.foreign))
	}
	left = append(left, v.kafka...)
	if len(left) == 0 {
		return
	}
	fmt.Fprintf(w, "%s:\n", intro)
	for _, l := range left {
		fmt.Fprintf(w, "  - %s\n", l)
	}
}

// apply drops the catch-up slots, then the pipeline's slot, publications
// and rows (capture.Retire), and returns what it did, in words.
func (v teardownView) apply(ctx context.Context, t target) (done []string, err error) {
	for _, s := range v.catchups {
		tag, err := t.db.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, s)
		if err != nil {
			return done, fmt.Errorf("drop catch-up slot %s: %w", s, err)
		}
		if tag.RowsAffected() > 0 {
			done = append(done, fmt.Sprintf("dropped catch-up slot %q", s))
		}
	}
	if v.trigger {
		if err := capture.DropDDLTrigger(ctx, t.db, v.p.Name); err != nil {
			return done, err
		}
		done = append(done, fmt.Sprintf("dropped event trigger %q", capture.DDLTrigger(v.p.Name)))
	}
	r, err := capture.Retire(ctx, t.db, ledger.New(t.db, v.p.Name), v.p.Source.Slot)
	if r.Slot != "" {
		done = append(done, fmt.Sprintf("dropped replication slot %q", r.Slot))
	}
	for _, pub := range r.Publications {
		done = append(done, fmt.Sprintf("dropped publication %q", pub))
	}
	if err != nil {
		return done, err
	}
	if v.record || v.marks > 0 || v.parked > 0 {
		done = append(done, fmt.Sprintf("deleted the pipeline's rows in the walcast schema (%d checkpoint(s), %d parked event(s))", v.marks, v.parked))
	}
	return done, nil
}

// writeDone reports what the teardown did, and what it left.
func (v teardownView) writeDone(w io.Writer, done []string) {
	if len(done) == 0 {
		fmt.Fprintf(w, "%s: nothing to tear down (it has no slot, publication or rows in this database)\n", v.what)
		return
	}
	fmt.Fprintf(w, "%s torn down:\n", v.what)
	for _, d := range done {
		fmt.Fprintf(w, "  - %s\n", d)
	}
	v.writeLeft(w, "Left")
}
