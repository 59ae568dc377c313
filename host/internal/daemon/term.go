package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walcast/walcast/host/internal/config"
	"github.com/walcast/walcast/host/internal/control/checkpoints"
	"github.com/walcast/walcast/host/internal/control/leader"
	"github.com/walcast/walcast/host/internal/control/lineage"
	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/control/pauses"
	"github.com/walcast/walcast/host/internal/control/reports"
	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/host/internal/delivery/fanout"
	"github.com/walcast/walcast/host/internal/delivery/isolate"
	"github.com/walcast/walcast/host/internal/delivery/schedule"
	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/host/internal/ledger"
	"github.com/walcast/walcast/host/internal/source/backfill"
	"github.com/walcast/walcast/host/internal/source/capture"
	"github.com/walcast/walcast/pluginkit"
)

// term is one leadership term of a pipeline in this process: opened once
// the process leads it, run until a stop, a failure or the loss of the
// leadership, then closed. Its lifecycle:
//
//	openTerm  source checked, plugins launched and opened, slot and
//	          publication prepared, checkpoints loaded; nothing runs yet.
//	          On error it undoes what it did (plugins closed; the slot,
//	          publications and walcast schema it created dropped).
//	run       starts every goroutine of the term (capture with its watch of
//	          the slots and the publication, backfill, one scheduler per
//	          sink, the checkpoint loop, the control listener) and returns
//	          only once all of them have ended.
//	close     writes the final checkpoints and slot position unless the
//	          leadership was lost, closes the plugins and the pool.
type term struct {
	opts  Options
	log   *slog.Logger
	lease *leader.Lease // nil with NoLeadership

	pool *pgxpool.Pool
	// db is the control plane as the term writes it: through the
	// leadership session when there is a lease (fenced), so that a leader
	// that lost it (paused, cut off) can no longer move a checkpoint,
	// park an event, detach a sink or record anything its successor
	// would act on. Reads go to the pool either way.
	db          controlDB
	checkpoints *checkpoints.Store // on db
	lineage     *lineage.Store     // on db
	parked      *parking.Store     // on db
	reports     *reports.Store     // on db
	captureCfg  capture.Config
	// epoch names the slot incarnation the term streams from
	// (lineage.Pipeline.Epoch): every batch carries it, so that a sink
	// skipping by a checkpoint of its own does so only within it.
	epoch string
	// formatOf is each sink's queue format (fanout.Queue.Format), in the
	// order of t.runs.
	formatOf []int
	runs     []*sinkRun
	tracker  *ack.Tracker
	fan      *fanout.Fanout
	capt     *capture.Capture
	filler   *backfill.Runner
	ctl      *control
	watch    *slotWatch
	parts    *partitionWatch
	// setup undoes what this term's start created in the source when the
	// term ends before streaming anything.
	setup     *capture.Setup
	streaming bool
	// lost: the leadership went during run; close writes nothing.
	lost bool
	// halt ends the term's deliveries at once; set by run before the
	// first delivery starts (haltDeliveries).
	haltMu sync.Mutex
	halt   func()

	// reg is what the process's /metrics shows for this pipeline while
	// the term runs (/healthz: streamHealth); deliverSeconds is in it,
	// observed by every scheduler the term builds.
	reg            *prometheus.Registry
	deliverSeconds *prometheus.HistogramVec
}

// openTerm prepares a term of the pipeline led through lease, in the
// order that keeps a failed start from leaving anything behind: check the
// source, start the sinks, prepare the source (slot and publication),
// load each sink's position, then build the schedulers and what runs
// them.
func openTerm(ctx context.Context, opts Options, lease *leader.Lease, log *slog.Logger) (t *term, err error) {
	t = &term{opts: opts, log: log, lease: lease}
	defer func() {
		if err != nil {
			t.close(context.WithoutCancel(ctx), ctx.Err() == nil)
			t = nil
		}
	}()
	if err := t.checkSource(ctx); err != nil {
		return t, err
	}
	// Plugins: launched, configured and opened before the slot and the
	// publication are created, so that a missing plugin, a checksum
	// mismatch or a config the plugin rejects fails the start without
	// leaving a slot that retains WAL.
	own, err := t.startSinks(ctx)
	if err != nil {
		return t, err
	}
	prep, err := t.prepareSource(ctx)
	if err != nil {
		return t, err
	}
	positions, err := t.loadPositions(ctx, own)
	if err != nil {
		return t, err
	}
	slots, resume, err := t.recoverCatchupSlots(ctx, prep)
	if err != nil {
		return t, err
	}
	if err := t.loadSinkFailures(ctx); err != nil {
		return t, err
	}
	t.buildSchedulers(prep, positions)
	if err := t.buildRunner(ctx, prep, slots, resume); err != nil {
		return t, err
	}
	return t, nil
}

// checkSource connects to the source and checks every privilege and
// setting the start needs before it creates anything (the walcast schema
// included); what it then creates is removed if it fails before
// streaming (close).
func (t *term) checkSource(ctx context.Context) error {
	p := t.opts.Pipeline
	var err error
	if t.pool, err = Connect(ctx, p.Source.DSN); err != nil {
		return err
	}
	t.db = t.pool
	if t.lease != nil {
		t.db = fenced{Pool: t.pool, lease: t.lease}
	}
	t.checkpoints = checkpoints.New(t.db, p.Name)
	t.lineage = lineage.New(t.db, p.Name)
	t.parked = parking.New(t.db, p.Name)
	t.reports = reports.New(t.db, p.Name)
	t.parts = &partitionWatch{db: t.db, p: p, log: t.log, untriggered: map[int64]bool{}}
	t.captureCfg = t.newCaptureConfig()
	if t.captureCfg.Formats, t.formatOf, err = sinkFormats(p); err != nil {
		return err
	}
	if t.setup, err = capture.Check(ctx, t.pool, ledger.New(t.pool, p.Name), t.captureCfg); err != nil {
		return fmt.Errorf("check source: %w", err)
	}
	return prepareBackfills(ctx, t.db, p, t.log)
}

// newCaptureConfig is the pipeline's capture as far as the pipeline file
// and the options say; prepareSource and buildRunner complete it.
func (t *term) newCaptureConfig() capture.Config {
	p := t.opts.Pipeline
	cfg := capture.Config{
		DSN:                   p.Source.DSN,
		Slot:                  p.Source.Slot,
		Publication:           p.Source.Publication,
		Tables:                p.Source.Tables,
		AllowKeyless:          p.Source.AllowKeyless,
		ApplicationName:       "walcast-" + p.Name,
		PrimaryKey:            capture.PrimaryKeyLookup(t.pool),
		Shapes:                ledger.New(t.db, p.Name),
		Pipeline:              p.Name,
		Logger:                t.log,
		AcceptGap:             t.opts.AcceptGap || resyncOnGap(p),
		ReceiveTimeout:        p.Source.ReceiveTimeout,
		DDLEvents:             p.Source.DDLEvents,
		PartitionDeletes:      p.Source.OnDetach == config.OnDetachDelete || p.Source.OnDetach == config.OnDetachEvent,
		PartitionDetachEvents: p.Source.OnDetach == config.OnDetachEvent,
		MessagePrefixes:       p.Source.Messages.Prefixes,
		// The partitions' baseline is on record before the slot starts,
		// so that no ATTACH, DETACH or TRUNCATE of a partition after the
		// slot's start can be taken for part of it (partitions.go).
		BeforeCreateSlot: t.parts.baseline,
	}
	if t.lease != nil {
		// A process that was frozen past its lease confirms nothing until
		// it knows it still leads.
		cfg.Fence = t.lease.Fresh
	}
	for _, sk := range p.Sinks {
		cfg.Sinks = append(cfg.Sinks, sk.ID)
	}
	return cfg
}

// startSinks launches, configures and opens every sink's plugin, in the
// pipeline's order (t.runs). It returns the position each destination
// keeps itself (pluginkit.OpenResult; a zero Checkpoint when it keeps none).
func (t *term) startSinks(ctx context.Context) (own []pluginkit.OpenResult, err error) {
	sinks := t.opts.Pipeline.Sinks
	own = make([]pluginkit.OpenResult, 0, len(sinks))
	for i := range sinks {
		s := &sinks[i]
		plugin, opened, err := startSink(ctx, t.opts.Launch, s)
		if plugin != nil {
			if t.lease != nil {
				plugin = fencedPlugin{Plugin: plugin, lease: t.lease, halt: t.haltDeliveries}
			}
			t.runs = append(t.runs, &sinkRun{cfg: s, plugin: plugin})
		}
		if err != nil {
			return nil, err
		}
		own = append(own, opened)
	}
	return own, nil
}

// prepareSource creates the slot and the publication when missing (or
// refuses a slot it cannot trust) and completes the capture's
// configuration with what it found.
func (t *term) prepareSource(ctx context.Context) (capture.Prepared, error) {
	prep, err := t.setup.Prepare(ctx, ledger.New(t.db, t.opts.Pipeline.Name))
	if err != nil {
		return prep, fmt.Errorf("prepare source: %w", err)
	}
	t.logPrepared(prep)
	if gap := prep.AcceptedGap; gap != nil && resyncOnGap(t.opts.Pipeline) {
		if err := healGap(ctx, t.db, t.opts.Pipeline, gap.Kind, gap.Tables, nil, t.log); err != nil {
			return prep, err
		}
	}
	rec, _, err := t.lineage.LoadPipeline(ctx)
	if err != nil {
		return prep, fmt.Errorf("prepare source: %w", err)
	}
	t.epoch = rec.Epoch()
	t.captureCfg.KeylessPublication = prep.KeylessPublication
	t.captureCfg.StatusInterval = min(10*time.Second, prep.WalSenderTimeout/4)
	return prep, nil
}

// loadPositions returns each sink's position, indexed like t.runs: its
// stored checkpoint, or the destination's own (own) when that is ahead
// and of the term's epoch. A destination's checkpoint of another epoch
// (recorded before a failover or a restore: the ids streamed now may be
// lower) is not a position at all; the stored checkpoints of an earlier
// slot were cleared when its gap was accepted.
func (t *term) loadPositions(ctx context.Context, own []pluginkit.OpenResult) ([]pluginkit.EventID, error) {
	stored, err := t.checkpoints.Load(ctx)
	if err != nil {
		return nil, err
	}
	positions := make([]pluginkit.EventID, len(t.runs))
	for i, r := range t.runs {
		if o := own[i]; o.Epoch == "" || t.epoch == "" || o.Epoch == t.epoch {
			positions[i] = o.Checkpoint
		} else {
			t.log.Warn("the destination's own checkpoint belongs to an earlier slot (a failover, a restore or a lost slot since): walcast does not skip by it, and the sink writes the new slot's events whatever their ids",
				"sink", r.cfg.ID, "checkpoint", o.Checkpoint.String(), "checkpoint_epoch", o.Epoch, "epoch", t.epoch)
		}
		if cp := stored[r.cfg.ID]; cp.Compare(positions[i]) > 0 {
			positions[i] = cp
		}
	}
	return positions, nil
}

// recoverCatchupSlots reconciles the catch-up slots of the pipeline with
// their records (isolate.Slots.Recover) and returns them, with the sinks
// that resume catching up (sink id → catch-up slot).
func (t *term) recoverCatchupSlots(ctx context.Context, prep capture.Prepared) (*isolate.Slots, map[string]string, error) {
	p := t.opts.Pipeline
	slots := isolate.NewSlots(t.db, p.Name, p.Source.Slot)
	if err := slots.Init(ctx); err != nil {
		return nil, nil, err
	}
	var durable []string
	for _, s := range p.Sinks {
		if s.Durable {
			durable = append(durable, s.ID)
		}
	}
	// A sink whose catch-up slot someone dropped resumes from the
	// pipeline's slot only with --accept-gap or on_gap = "resync", its
	// gap recorded up to where that slot starts (and, with on_gap =
	// "resync", its tables resynced to it).
	var acceptGap func(ctx context.Context, reason, sink string) error
	if t.opts.AcceptGap || resyncOnGap(p) {
		acceptGap = func(ctx context.Context, reason, sink string) error {
			t.log.Warn("accepted a gap: the sink's catch-up slot was dropped; it resumes from the pipeline's slot and misses the changes in between (recorded in walcast.gaps)",
				"sink", sink, "resumes_at", pluginkit.FormatLSN(prep.ConfirmedFlush))
			if err := t.lineage.RecordGap(ctx, reason, []string{sink}, prep.ConfirmedFlush); err != nil {
				return err
			}
			if !resyncOnGap(p) {
				return nil
			}
			return healGap(ctx, t.db, p, reason, nil, []string{sink}, t.log)
		}
	}
	resume, err := slots.Recover(ctx, durable, acceptGap)
	if err != nil {
		return nil, nil, err
	}
	return slots, resume, nil
}

// loadSinkFailures marks the sinks whose failure stopped the last run
// (saveLoop forgets it once they deliver again).
func (t *term) loadSinkFailures(ctx context.Context) error {
	failures, err := t.reports.LoadSinkFailures(ctx)
	if err != nil {
		return err
	}
	for _, r := range t.runs {
		if f, ok := failures[r.cfg.ID]; ok {
			r.failed = true
			t.log.Warn("sink stopped the last run; delivering again", "sink", r.cfg.ID, "stopped_at", f.At, "err", f.Error)
		}
	}
	return nil
}

// buildSchedulers builds the pipeline's tracker, starting at the slot's
// confirmed position with every sink at its position, and for each sink a
// queue and a scheduler, then the fan-out over the queues.
func (t *term) buildSchedulers(prep capture.Prepared, positions []pluginkit.EventID) {
	specs := make([]ack.SinkSpec, len(t.runs))
	for i, r := range t.runs {
		specs[i] = ack.SinkSpec{ID: r.cfg.ID, Durable: r.cfg.Durable}
	}
	t.tracker = ack.New(specs, prep.ConfirmedFlush)
	t.deliverSeconds = newDeliverSeconds()
	queues := make([]*fanout.Queue, len(t.runs))
	for i, r := range t.runs {
		t.tracker.RaisePosition(i, positions[i])
		// The scheduler keeps its own look-ahead (a batch per lane plus
		// one); the queue absorbs the moments it is busy landing results
		// (sizes measured: docs/benchmarks.md, "What was changed, and its
		// effect", item 4).
		r.queue = fanout.NewQueue(max(2*BatchSize(r.cfg.Delivery, r.plugin.Info()), 1024), r.cfg.Durable)
		r.queue.Sink = r.cfg.ID
		if i < len(t.formatOf) {
			r.queue.Format = t.formatOf[i]
		}
		queues[i] = r.queue
		if r.plugin.Info().Ordered && r.cfg.Delivery.Ordering != config.OrderingStrict {
			t.log.Info("sink delivers one batch at a time in commit order, as its plugin requires", "sink", r.cfg.ID)
		}
		r.meter = schedule.NewMeter(r.cfg.ID)
		r.sched = t.newScheduler(r, r.queue, t.tracker, i, positions[i])
		t.log.Info("sink ready", "sink", r.cfg.ID, "type", r.cfg.Type, "durable", r.cfg.Durable, "position", positions[i].String())
	}
	t.fan = fanout.New(t.tracker, queues)
}

// newScheduler returns a scheduler for sink r reading q and resolving
// into sink index of tr (the pipeline's tracker, or a catch-up stream's),
// skipping the events at or below position.
func (t *term) newScheduler(r *sinkRun, q *fanout.Queue, tr *ack.Tracker, index int, position pluginkit.EventID) *schedule.Scheduler {
	cfg := ScheduleConfig(r.cfg, r.plugin.Info())
	cfg.Index = index
	cfg.Position = position
	cfg.Epoch = t.epoch
	cfg.Parked = t.parked
	cfg.Meter = r.meter
	cfg.Logger = t.log
	cfg.Observe = func(took time.Duration, outcome string) {
		t.deliverSeconds.WithLabelValues(r.cfg.ID, r.cfg.Type, outcome).Observe(took.Seconds())
	}
	return schedule.New(cfg, q, tr, r.plugin)
}

// buildRunner builds what run starts besides the schedulers: the capture
// feeding the fan-out, the detach and rejoin of slow durable sinks, the
// backfills, the control listener, and the term's metrics.
func (t *term) buildRunner(ctx context.Context, prep capture.Prepared, slots *isolate.Slots, resume map[string]string) error {
	p := t.opts.Pipeline
	t.buildCapture(prep)
	// The partitions' first check before streaming: what changed since
	// the last check, or since the baseline recorded before a new slot
	// was created (BeforeCreateSlot), is acted on now.
	t.parts.check(ctx)
	t.isolateSinks(resume, slots, prep.ConfirmedFlush)
	t.filler = newFiller(p, prep.KeylessPublication, t.tracker, t.lease, t.log)
	t.ctl = &control{parked: t.parked, pauses: pauses.New(t.db, t.opts.Pipeline.Name), runs: t.runs, log: t.log, backfill: t.filler}
	// Pauses hold from the first event on, not from the first poll.
	if err := t.ctl.applyPauses(ctx); err != nil {
		return err
	}
	collector := newPipelineCollector(t.runs, t.tracker, t.fan, t.capt, slotRetainedWAL(t.pool, p.Source.Slot))
	collector.catchupRetained = catchupRetained(t.pool, p.Name)
	t.reg = newRegistry(p.Name, collector, t.deliverSeconds, t.watch.collectors()...)
	return nil
}

// buildCapture completes the capture's configuration (confirmations, the
// watch of the slots and the publication) and builds it on the fan-out.
func (t *term) buildCapture(prep capture.Prepared) {
	// Every confirmation is recorded first, through the fenced store, so
	// that the next start can tell a slot someone else moved; the
	// checkpoints are written before it (checkpointsFirst).
	t.captureCfg.Confirm = checkpointsFirst{checkpoints: t.checkpoints, lineage: t.lineage, tracker: t.tracker, runs: t.runs}
	t.captureCfg.ConfirmLimit = prep.ConfirmLimit
	// What is watched while the pipeline streams, every SlotCheckInterval,
	// on the capture's one watch loop, in this order: the WAL the slots
	// retain (a warning and a metric before PostgreSQL invalidates one;
	// never stops the stream), then the partitions of the captured
	// partitioned tables (an ATTACH, DETACH, DROP or TRUNCATE of one:
	// partitions.go; never stops the stream either), then the
	// publication's tables (one removed by hand stops the pipeline, rather
	// than its changes silently ceasing).
	t.watch = newSlotWatch(t.pool, t.opts.Pipeline.Name, t.captureCfg.Slot, t.opts.WarnRetainedWAL, t.log)
	published := capture.PublicationWatch(t.pool, t.captureCfg, prep.Published)
	t.captureCfg.Watch = func(ctx context.Context) error {
		t.watch.check(ctx)
		t.parts.check(ctx)
		return published(ctx)
	}
	t.captureCfg.WatchEvery = t.opts.SlotCheckInterval
	t.capt = capture.New(t.captureCfg, t.fan)
}

// newFiller returns the runner of the pipeline's backfills, its window on
// the tracker's flush position.
func newFiller(p *config.Pipeline, keyless string, tracker *ack.Tracker, lease *leader.Lease, log *slog.Logger) *backfill.Runner {
	sinkIDs := make([]string, len(p.Sinks))
	for i := range p.Sinks {
		sinkIDs[i] = p.Sinks[i].ID
	}
	cfg := backfill.Config{
		DSN: p.Source.DSN, Pipeline: p.Name, Publication: p.Source.Publication, KeylessPublication: keyless, Tables: p.Source.Tables, Sinks: sinkIDs,
		Flushed: tracker.Flush, Logger: log,
	}
	if lease != nil {
		// Chunks and their progress are written on a connection of their
		// own (a chunk holds row locks): each checks the lease's lock.
		class, obj := leader.Keys(p.Name)
		cfg.Leader = &backfill.Lock{PID: lease.PID(), Class: class, Obj: obj}
	}
	return backfill.NewRunner(cfg)
}

func (t *term) logPrepared(prep capture.Prepared) {
	log, cfg := t.log, t.captureCfg
	if prep.CreatedPublication {
		log.Info("created publication", "publication", cfg.Publication)
	}
	if prep.CreatedSlot {
		log.Info("created replication slot", "slot", cfg.Slot)
	}
	if g := prep.AcceptedGap; g != nil {
		log.Warn("accepted a gap: changes between the old checkpoints and the new slot's start are not delivered; recorded in walcast.gaps",
			"reason", g.Kind, "slot", cfg.Slot, "old_checkpoints", g.Checkpoints, "new_slot_start", pluginkit.FormatLSN(prep.ConfirmedFlush))
	}
	for _, tb := range prep.Keyless {
		log.Warn("table has no key: only its inserts and truncates are captured (publication "+prep.KeylessPublication+"), with key null", "table", tb)
	}
	if len(prep.Unlisted) > 0 {
		log.Warn("the publication also publishes tables that are not in source.tables; their changes are dropped (metric walcast_events_unlisted_total)",
			"publication", cfg.Publication, "tables", strings.Join(prep.Unlisted, ", "))
	}
}

// run streams until ctx ends (a clean stop: nil), the stream or a sink
// fails (that error), or the leadership is lost (an error wrapping
// leader.ErrLost). Every goroutine it starts has ended when it returns.
//
// It starts the schedulers, the control plane's loops and the stream, in
// that order, waits for what ends the run (awaitEnd), then stops them in
// the reverse order: the stream first, so that nothing new is queued,
// then the schedulers with their batches in flight (drain), then the
// checkpoint loop.
func (t *term) run(ctx context.Context) (err error) {
	// wg joins every goroutine of the term. Deferred first, so it runs
	// last: after cancel below has told them all to end.
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// deliveries is the context of every delivery and of the checkpoint
	// loop: it outlives ctx by up to ShutdownTimeout (drain), so that the
	// batches in flight at a stop can finish and be checkpointed.
	deliveries, cancelDeliveries := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelDeliveries()
	t.haltMu.Lock()
	t.halt = func() { cancelDeliveries(); cancel() }
	t.haltMu.Unlock()
	if t.lease != nil && !t.awaitLeadership(ctx, &wg) {
		return nil
	}
	stop := make(chan struct{})
	schedErr, schedsDone := t.startSchedulers(deliveries, stop, &wg)
	// The control-plane loops (checkpoints, the control listener,
	// backfills) end early only on an error retrying cannot fix (a
	// privilege revoked): it stops the term like a failed sink.
	planeErr := make(chan error, 3)
	flushDone := t.startControlPlane(ctx, deliveries, planeErr, &wg)
	captureCtx, cancelCapture := context.WithCancel(ctx)
	defer cancelCapture()
	captureErr, fillDone := t.startStream(captureCtx, planeErr, &wg)
	if t.opts.Ready != nil {
		t.opts.Ready()
	}

	captureDone, err := t.awaitEnd(ctx, captureErr, schedErr, planeErr)
	if t.lost {
		cancelDeliveries()
	}
	cancelCapture()
	<-fillDone
	if !captureDone {
		if cerr := <-captureErr; err == nil {
			err = cerr
		}
	}
	close(stop)
	t.drain(schedsDone, cancelDeliveries)
	<-flushDone
	return err
}

// awaitLeadership makes sure this term leads alone before anything is
// streamed or delivered, and has losing the lease's session end the run
// and its deliveries at once (a watch on wg, until ctx ends). It reports
// false when ctx ended first.
func (t *term) awaitLeadership(ctx context.Context, wg *sync.WaitGroup) bool {
	// Losing the session ends this run and its deliveries at once: a
	// standby may be taking over.
	wg.Go(func() {
		select {
		case <-t.lease.Lost():
			t.haltDeliveries()
		case <-ctx.Done():
		}
	})
	// A frozen predecessor may still think it leads: nothing is
	// streamed or delivered before its lease runs out.
	return t.lease.WaitOutPredecessor(ctx) == nil
}

// startSchedulers starts every sink's scheduler on wg, delivering with
// deliveries until stop is closed. The first error of a sink that cannot
// go on comes on schedErr (it stops the pipeline; a fatal one is put on
// record for walcast status); schedsDone is closed once all have ended.
func (t *term) startSchedulers(deliveries context.Context, stop <-chan struct{}, wg *sync.WaitGroup) (schedErr <-chan error, schedsDone <-chan struct{}) {
	var scheds sync.WaitGroup
	errs := make(chan error, len(t.runs))
	for _, r := range t.runs {
		scheds.Go(func() {
			err := r.run(deliveries, stop)
			if err == nil {
				return
			}
			if kind, _ := attempt.KindOf(err); kind == attempt.KindFatal {
				recordFailure(t.reports, r.cfg.ID, err, t.log)
			}
			errs <- fmt.Errorf("sink %s: %w", r.cfg.ID, err)
		})
	}
	done := make(chan struct{})
	wg.Go(func() {
		scheds.Wait()
		close(done)
	})
	return errs, done
}

// startControlPlane starts, on wg, the checkpoint loop (on deliveries, so
// that it records what the drain delivers; flushDone is closed when it
// ends), the control listener and the report of the streams (on ctx).
// An error retrying cannot fix comes on planeErr.
func (t *term) startControlPlane(ctx, deliveries context.Context, planeErr chan<- error, wg *sync.WaitGroup) (flushDone <-chan struct{}) {
	done := make(chan struct{})
	wg.Go(func() {
		defer close(done)
		if err := saveLoop(deliveries, t.checkpoints, t.reports, t.tracker, t.runs, t.opts.CheckpointInterval, t.log); err != nil {
			planeErr <- err
		}
	})
	wg.Go(func() {
		if err := t.ctl.listen(ctx, t.opts.Pipeline.Source.DSN, 5*time.Second); err != nil {
			planeErr <- err
		}
	})
	wg.Go(func() { t.reportStreams(ctx) })
	return done
}

// startStream starts, on wg, the capture (its error comes on captureErr)
// and the backfills (fillDone is closed when they end; an error retrying
// cannot fix comes on planeErr), both until ctx ends. Backfills write into
// the WAL only while the stream runs, so that their chunks are read back
// (and their window moves) promptly.
func (t *term) startStream(ctx context.Context, planeErr chan<- error, wg *sync.WaitGroup) (captureErr <-chan error, fillDone <-chan struct{}) {
	errc := make(chan error, 1)
	wg.Go(func() { errc <- t.capt.Run(ctx) })
	t.streaming = true
	done := make(chan struct{})
	wg.Go(func() {
		defer close(done)
		if err := t.filler.Run(ctx); err != nil {
			planeErr <- err
		}
	})
	return errc, done
}

// awaitEnd waits for what ends the run: ctx (a stop, or the lease lost),
// the stream failing, or a sink that cannot go on. It says which in the
// log, and sets t.lost when the lease is gone, whatever ended first.
func (t *term) awaitEnd(ctx context.Context, captureErr, schedErr, planeErr <-chan error) (captureDone bool, err error) {
	sinkFailed, planeFailed := false, false
	select {
	case <-ctx.Done():
	case err = <-captureErr:
		captureDone = true
	case err = <-schedErr:
		sinkFailed = true
	case err = <-planeErr:
		planeFailed = true
	}
	timeout := t.opts.ShutdownTimeout
	switch {
	case t.lease != nil && t.lease.Err() != nil:
		// Whatever ended first (a delivery refused, a park or a
		// checkpoint that could not be written), this is neither a
		// shutdown nor a failure of the stream or a sink: another walcast
		// may lead now. Nothing more is delivered, confirmed or
		// checkpointed by this one.
		t.lost, err = true, t.lease.Err()
	case planeFailed:
		t.log.Info("stopping: walcast's state in the source database cannot be read or written; waiting for deliveries in flight", "timeout", timeout)
	case sinkFailed:
		// A sink's scheduler cannot go on: stop everything rather than let
		// its queue fill and stall the stream silently. Run returns err
		// and the caller reports it, once.
		t.log.Info("stopping: a sink failed; waiting for deliveries in flight", "timeout", timeout)
	case captureDone && err != nil:
		// Run returns err and the caller reports it, once.
		t.log.Info("stopping: the replication stream failed; waiting for deliveries in flight", "timeout", timeout)
	case !captureDone:
		t.log.Info("stopping: no new events; waiting for deliveries in flight", "timeout", timeout)
	}
	return captureDone, err
}

// drain waits for the schedulers to finish their batches in flight, at
// most ShutdownTimeout, then cancels what is left (cancelDeliveries).
func (t *term) drain(schedsDone <-chan struct{}, cancelDeliveries context.CancelFunc) {
	defer cancelDeliveries()
	select {
	case <-schedsDone:
	case <-time.After(t.opts.ShutdownTimeout):
		var batches int64
		for _, r := range t.runs {
			batches += r.stats().InFlight.Load()
		}
		// The sink stopped lines below count, per sink, what is left
		// undelivered and what the next run delivers again.
		t.log.Warn("deliveries still in flight at shutdown timeout; they will be replayed on restart", "batches_in_flight", batches)
		cancelDeliveries()
		<-schedsDone
	}
}

// close ends the term: the final checkpoint and slot position (with a fresh
// deadline; both only ever record what sinks acknowledged) unless the
// leadership was lost, whose successor owns them; then the plugins and the
// pool. It is safe on a term that openTerm gave up on. failed says the term
// ends for an error rather than because it was asked to stop: only a start
// that failed removes what it created before streaming. One that was
// stopped keeps its slot (the changes committed since it was created are
// in it, and the next run streams them), its publications and the schema.
func (t *term) close(ctx context.Context, failed bool) {
	log := t.log
	// A term that lost its leadership leaves the source to whoever leads
	// now, who may be using what this start created.
	if failed && t.setup != nil && !t.streaming && (t.lease == nil || t.lease.Err() == nil) {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if err := t.setup.Undo(uctx); err != nil {
			log.Warn("remove what this failed start created in the source", "err", err)
		}
		cancel()
	}
	if t.capt != nil && t.streaming {
		t.finish(ctx)
		t.logSinksStopped()
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for _, r := range t.runs {
		if cerr := r.plugin.Close(cctx); cerr != nil {
			log.Warn("close sink", "sink", r.cfg.ID, "err", cerr)
		}
	}
	if t.pool != nil {
		t.pool.Close()
	}
}

// finish writes the final checkpoints and usage and confirms the final
// position to the slot, with a fresh deadline; with the leadership lost
// it abandons the stream instead and writes nothing.
func (t *term) finish(ctx context.Context) {
	if t.lost {
		t.capt.Abandon()
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if serr := saveCheckpoints(fctx, t.checkpoints, t.tracker, t.runs, true); serr != nil {
		t.log.Warn("final checkpoint", "err", serr)
	}
	if uerr := saveUsage(fctx, t.reports, t.runs); uerr != nil {
		t.log.Warn("final usage", "err", uerr)
	}
	if cerr := t.capt.Close(fctx); cerr != nil {
		t.log.Warn("final slot confirmation", "err", cerr)
	}
}

// logSinksStopped says, per sink, what the term delivered and what it
// leaves to whoever streams next.
func (t *term) logSinksStopped() {
	positions := t.tracker.Positions()
	for i, r := range t.runs {
		st := r.stats()
		// unresolved: read from the slot and not delivered (queued,
		// held behind an earlier event of their row, backing off, or
		// abandoned at the shutdown timeout). ahead: delivered after
		// such an event; the checkpoint is one position per sink and
		// cannot cover them, so whoever streams next delivers both
		// again (at-least-once).
		unresolved, _, _ := t.tracker.Backlog(i)
		ahead := t.tracker.Ahead(i)
		position := positions[i]
		if r.isolation != nil {
			// A detached sink's position is its catch-up stream's
			// (counted there, not here).
			if id, ok := r.isolation.Position(); ok {
				position = id
			}
		}
		t.log.Info("sink stopped", "sink", r.cfg.ID, "delivered", st.Delivered.Load(), "skipped", st.Skipped.Load(),
			"filtered", st.Filtered.Load(), "failed_attempts", st.Failures.Load(), "throttled", st.Throttles.Load(),
			"parked", st.Parked.Load(), "replayed", st.Replayed.Load(), "duplicates", st.Duplicates.Load(), "dropped", r.queue.Dropped(),
			"position", position.String(), "unresolved", unresolved, "redelivered_next", ahead)
		if ahead > 0 && !t.lost {
			t.log.Info("sink stopped with deliveries past an undelivered event; the next run delivers them again",
				"sink", r.cfg.ID, "position", position.String(), "unresolved", unresolved, "redelivered_next", ahead)
		}
	}
}

// haltDeliveries cancels every delivery of the term and ends its run; it
// returns once their context is cancelled. Before run set it up there is
// nothing to halt.
func (t *term) haltDeliveries() {
	t.haltMu.Lock()
	halt := t.halt
	t.haltMu.Unlock()
	if halt != nil {
		halt()
	}
}

// checkpointsFirst records a position as confirmable to the slot only
// after writing the checkpoints: a sink's stored checkpoint is then never
// behind what PostgreSQL will not send again, so whoever sees the slot
// confirmed past a change (walcast backfill --wait) finds it covered by
// the checkpoint of every sink that holds the slot back.
type checkpointsFirst struct {
	checkpoints *checkpoints.Store
	lineage     *lineage.Store
	tracker     *ack.Tracker
	runs        []*sinkRun
}

func (c checkpointsFirst) RaiseConfirmLimit(ctx context.Context, lsn uint64) error {
	// Positions read now are at least those lsn was derived from.
	if err := saveCheckpoints(ctx, c.checkpoints, c.tracker, c.runs, true); err != nil {
		return err
	}
	return c.lineage.RaiseConfirmLimit(ctx, lsn)
}

// fencedPlugin lets a delivery through only while the lease is known to be
// held: a process that was frozen longer than its lease's freshness waits
// for its next ping, which tells it that it lost (and its run ends) or
// still leads. The remaining window (frozen between this check and the
// request leaving) is what sink-side fencing, such as the Kafka sink's
// transactions, closes.
type fencedPlugin struct {
	Plugin
	lease *leader.Lease
	halt  func()
}

func (f fencedPlugin) Deliver(ctx context.Context, b attempt.Batch) (attempt.Result, error) {
	if err := f.lease.WaitFresh(ctx); err != nil {
		if errors.Is(err, leader.ErrLost) {
			// Not the sink's failure: the term ends. Its deliveries are
			// cancelled before this one returns, so that the scheduler
			// takes the refusal for the stop it is (the events stay
			// unresolved, for whoever leads next), never for a failed
			// attempt, which would count against the sink and could park
			// its events or detach it.
			f.halt()
		}
		return attempt.Result{}, fmt.Errorf("deliver: %w", err)
	}
	return f.Plugin.Deliver(ctx, b)
}
