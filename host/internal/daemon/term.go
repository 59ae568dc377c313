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
	"github.com/walcast/walcast/host/internal/control/checkpoint"
	"github.com/walcast/walcast/host/internal/control/leader"
	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/host/internal/delivery/fanout"
	"github.com/walcast/walcast/host/internal/delivery/isolate"
	"github.com/walcast/walcast/host/internal/delivery/schedule"
	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
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
	db      controlDB
	store   *checkpoint.Store // on db
	ccfg    capture.Config
	runs    []*sinkRun
	tracker *ack.Tracker
	fan     *fanout.Fanout
	capt    *capture.Capture
	filler  *backfill.Runner
	ctl     *control
	watch   *slotWatch
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
	// the term runs (/healthz: streamHealth).
	reg *prometheus.Registry
}

// openTerm prepares a term of the pipeline led through lease.
func openTerm(ctx context.Context, opts Options, lease *leader.Lease, log *slog.Logger) (t *term, err error) {
	p := opts.Pipeline
	t = &term{opts: opts, log: log, lease: lease}
	defer func() {
		if err != nil {
			t.close(context.WithoutCancel(ctx))
			t = nil
		}
	}()
	if t.pool, err = Connect(ctx, p.Source.DSN); err != nil {
		return t, err
	}
	t.db = t.pool
	if lease != nil {
		t.db = fenced{Pool: t.pool, lease: lease}
	}
	t.store = checkpoint.New(t.db, p.Name)
	t.ccfg = capture.Config{
		DSN:             p.Source.DSN,
		Slot:            p.Source.Slot,
		Publication:     p.Source.Publication,
		Tables:          p.Source.Tables,
		AllowKeyless:    p.Source.AllowKeyless,
		ApplicationName: "walcast-" + p.Name,
		PrimaryKey:      capture.PrimaryKeyLookup(t.pool),
		Pipeline:        p.Name,
		Logger:          log,
		AcceptGap:       opts.AcceptGap,
		ReceiveTimeout:  p.Source.ReceiveTimeout,
	}
	if lease != nil {
		// A process that was frozen past its lease confirms nothing until
		// it knows it still leads.
		t.ccfg.Fence = lease.Fresh
	}
	for _, sk := range p.Sinks {
		t.ccfg.Sinks = append(t.ccfg.Sinks, sk.ID)
	}
	// Every privilege and setting the start needs is checked before it
	// creates anything (the walcast schema included), and what it then
	// creates is removed if it fails before streaming (close).
	if t.setup, err = capture.Check(ctx, t.pool, t.ccfg); err != nil {
		return t, fmt.Errorf("check source: %w", err)
	}
	if err := prepareBackfills(ctx, t.db, p, log); err != nil {
		return t, err
	}

	// Plugins: launched, configured and opened before the slot and the
	// publication are created, so that a missing plugin, a checksum
	// mismatch or a config the plugin rejects fails the start without
	// leaving a slot that retains WAL.
	specs := make([]ack.SinkSpec, 0, len(p.Sinks))
	skip := make([]pluginkit.EventID, 0, len(p.Sinks))
	for i := range p.Sinks {
		s := &p.Sinks[i]
		plugin, cp, err := startSink(ctx, opts.Launch, s)
		if plugin != nil {
			if lease != nil {
				plugin = fencedPlugin{Plugin: plugin, lease: lease, halt: t.haltDeliveries}
			}
			t.runs = append(t.runs, &sinkRun{cfg: s, plugin: plugin})
		}
		if err != nil {
			return t, err
		}
		specs = append(specs, ack.SinkSpec{ID: s.ID, Durable: s.Durable})
		skip = append(skip, cp)
	}

	prep, err := t.setup.Prepare(ctx, t.store)
	if err != nil {
		return t, fmt.Errorf("prepare source: %w", err)
	}
	t.logPrepared(prep)
	t.ccfg.KeylessPublication = prep.KeylessPublication
	t.ccfg.StatusInterval = min(10*time.Second, prep.WalSenderTimeout/4)
	marks, err := t.store.Load(ctx)
	if err != nil {
		return t, err
	}
	slots := isolate.NewSlots(t.db, p.Name, p.Source.Slot)
	if err := slots.Init(ctx); err != nil {
		return t, err
	}
	var durable []string
	for _, s := range p.Sinks {
		if s.Durable {
			durable = append(durable, s.ID)
		}
	}
	// A sink whose catch-up slot someone dropped resumes from the
	// pipeline's slot only with --accept-gap, its gap recorded up to
	// where that slot starts.
	var acceptGap func(ctx context.Context, reason, sink string) error
	if opts.AcceptGap {
		acceptGap = func(ctx context.Context, reason, sink string) error {
			log.Warn("accepted a gap: the sink's catch-up slot was dropped; it resumes from the pipeline's slot and misses the changes in between (recorded in walcast.gaps)",
				"sink", sink, "resumes_at", pluginkit.FormatLSN(prep.ConfirmedFlush))
			return t.store.RecordGap(ctx, reason, []string{sink}, prep.ConfirmedFlush)
		}
	}
	resume, err := slots.Recover(ctx, durable, acceptGap)
	if err != nil {
		return t, err
	}
	for i := range t.runs {
		// The destination's own checkpoint counts only when it is ahead.
		if through := marks[t.runs[i].cfg.ID]; through.Compare(skip[i]) > 0 {
			skip[i] = through
		}
	}

	failures, err := t.store.LoadSinkFailures(ctx)
	if err != nil {
		return t, err
	}
	for _, r := range t.runs {
		if f, ok := failures[r.cfg.ID]; ok {
			r.failed = true
			log.Warn("sink stopped the last run; delivering again", "sink", r.cfg.ID, "stopped_at", f.At, "err", f.Error)
		}
	}

	t.tracker = ack.New(specs, prep.ConfirmedFlush)
	deliverSeconds := newDeliverSeconds()
	// newSched returns a scheduler for sink r reading q and resolving into
	// sink index of tr: the pipeline's tracker, or a catch-up stream's.
	newSched := func(r *sinkRun, q *fanout.Queue, tr *ack.Tracker, index int, skip pluginkit.EventID) *schedule.Scheduler {
		scfg := ScheduleConfig(r.cfg, r.plugin.Info())
		scfg.Index = index
		scfg.Position = skip
		scfg.Parked = t.store
		scfg.Meter = r.meter
		scfg.Logger = log
		scfg.Observe = func(took time.Duration, outcome string) {
			deliverSeconds.WithLabelValues(r.cfg.ID, r.cfg.Type, outcome).Observe(took.Seconds())
		}
		return schedule.New(scfg, q, tr, r.plugin)
	}
	queues := make([]*fanout.Queue, len(t.runs))
	for i, r := range t.runs {
		t.tracker.SetWatermark(i, skip[i])
		// The scheduler keeps its own look-ahead (a batch per lane plus one);
		// the queue absorbs the moments it is busy landing results (one batch
		// measured ~7% slower than two with batch_size 1000, four no faster).
		r.queue = fanout.NewQueue(max(2*BatchSize(r.cfg.Delivery, r.plugin.Info()), 1024), r.cfg.Durable)
		r.queue.Sink = r.cfg.ID
		queues[i] = r.queue
		if r.plugin.Info().Ordered && r.cfg.Delivery.Ordering != config.OrderingStrict {
			log.Info("sink delivers one batch at a time in commit order, as its plugin requires", "sink", r.cfg.ID)
		}
		r.meter = schedule.NewMeter(r.cfg.ID)
		r.sched = newSched(r, r.queue, t.tracker, i, skip[i])
		log.Info("sink ready", "sink", r.cfg.ID, "type", r.cfg.Type, "durable", r.cfg.Durable, "resume_after", skip[i].String())
	}
	t.fan = fanout.New(t.tracker, queues)
	// Every confirmation is recorded first, through the fenced store, so
	// that the next start can tell a slot someone else moved; the
	// checkpoints are written before it (checkpointsFirst).
	t.ccfg.Confirm = checkpointsFirst{store: t.store, tracker: t.tracker, runs: t.runs}
	t.ccfg.ConfirmLimit = prep.ConfirmLimit
	// What is watched while the pipeline streams, every SlotCheckInterval,
	// on the capture's one watch loop, in this order: the WAL the slots
	// retain (a warning and a metric before PostgreSQL invalidates one;
	// never stops the stream), then the publication's tables (one removed
	// by hand stops the pipeline, rather than its changes silently
	// ceasing).
	t.watch = newSlotWatch(t.pool, p.Name, t.ccfg.Slot, opts.WarnRetainedWAL, log)
	published := capture.PublicationWatch(t.pool, t.ccfg, prep.Published)
	t.ccfg.Watch = func(ctx context.Context) error {
		t.watch.check(ctx)
		return published(ctx)
	}
	t.ccfg.WatchEvery = opts.SlotCheckInterval
	t.capt = capture.New(t.ccfg, t.fan)
	isolateSinks(t.runs, resume, slots, t.fan, t.tracker, prep.ConfirmedFlush, t.capt, t.ccfg, newSched, log)
	t.filler = newFiller(p, prep.KeylessPublication, t.tracker, lease, log)
	t.ctl = &control{store: t.store, runs: t.runs, log: log, backfill: t.filler}
	// Pauses hold from the first event on, not from the first poll.
	if err := t.ctl.applyPauses(ctx); err != nil {
		return t, err
	}
	coll := newPipelineCollector(t.runs, t.tracker, t.fan, t.capt, slotRetainedWAL(t.pool, p.Source.Slot))
	coll.catchupRetained = catchupRetained(t.pool, p.Name)
	t.reg = newRegistry(p.Name, coll, deliverSeconds, t.watch.collectors()...)
	return t, nil
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
	log, ccfg := t.log, t.ccfg
	if prep.CreatedPublication {
		log.Info("created publication", "publication", ccfg.Publication)
	}
	if prep.CreatedSlot {
		log.Info("created replication slot", "slot", ccfg.Slot)
	}
	if g := prep.AcceptedGap; g != nil {
		log.Warn("accepted a gap: changes between the old checkpoints and the new slot's start are not delivered; recorded in walcast.gaps",
			"reason", g.Kind, "slot", ccfg.Slot, "old_checkpoints", g.Checkpoints, "new_slot_start", pluginkit.FormatLSN(prep.ConfirmedFlush))
	}
	for _, tb := range prep.Keyless {
		log.Warn("table has no key: only its inserts and truncates are captured (publication "+prep.KeylessPublication+"), with key null", "table", tb)
	}
	if len(prep.Unlisted) > 0 {
		log.Warn("the publication also publishes tables that are not in source.tables; their changes are dropped (metric walcast_events_unlisted_total)",
			"publication", ccfg.Publication, "tables", strings.Join(prep.Unlisted, ", "))
	}
}

// run streams until ctx ends (a clean stop: nil), the stream or a sink
// fails (that error), or the leadership is lost (an error wrapping
// leader.ErrLost). Every goroutine it starts has ended when it returns.
func (t *term) run(ctx context.Context) (err error) {
	opts, log := t.opts, t.log
	// wg joins every goroutine of the term. Deferred first, so it runs
	// last: after cancel below has told them all to end.
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// hard ends in-flight deliveries; it outlives ctx by ShutdownTimeout.
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	t.haltMu.Lock()
	t.halt = func() { cancelHard(); cancel() }
	t.haltMu.Unlock()
	if t.lease != nil {
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
		if err := t.lease.WaitOutPredecessor(ctx); err != nil {
			return nil
		}
	}
	stop := make(chan struct{})

	// The schedulers: the first error of a sink that cannot go on stops
	// the pipeline.
	var scheds sync.WaitGroup
	schedErr := make(chan error, len(t.runs))
	for _, r := range t.runs {
		scheds.Go(func() {
			err := r.run(hard, stop)
			if err == nil {
				return
			}
			if kind, _ := attempt.KindOf(err); kind == attempt.KindFatal {
				recordFailure(t.store, r.cfg.ID, err, log)
			}
			schedErr <- fmt.Errorf("sink %s: %w", r.cfg.ID, err)
		})
	}
	schedsDone := make(chan struct{})
	wg.Go(func() {
		scheds.Wait()
		close(schedsDone)
	})
	// The control-plane loops (checkpoints, the control listener,
	// backfills) end early only on an error retrying cannot fix (a
	// privilege revoked): it stops the term like a failed sink.
	planeErr := make(chan error, 3)
	flushDone := make(chan struct{})
	wg.Go(func() {
		defer close(flushDone)
		if err := saveLoop(hard, t.store, t.tracker, t.runs, opts.CheckpointInterval, log); err != nil {
			planeErr <- err
		}
	})
	wg.Go(func() {
		if err := t.ctl.listen(ctx, opts.Pipeline.Source.DSN, 5*time.Second); err != nil {
			planeErr <- err
		}
	})
	wg.Go(func() { t.reportStreams(ctx) })

	captureErr := make(chan error, 1)
	captureCtx, cancelCapture := context.WithCancel(ctx)
	defer cancelCapture()
	wg.Go(func() { captureErr <- t.capt.Run(captureCtx) })
	t.streaming = true
	// Backfills write into the WAL only while the stream runs, so that
	// their chunks are read back (and their window moves) promptly.
	fillDone := make(chan struct{})
	wg.Go(func() {
		defer close(fillDone)
		if err := t.filler.Run(captureCtx); err != nil {
			planeErr <- err
		}
	})
	if opts.Ready != nil {
		opts.Ready()
	}

	captureDone, err := t.awaitEnd(ctx, captureErr, schedErr, planeErr)
	if t.lost {
		cancelHard()
	}
	cancelCapture()
	<-fillDone
	if !captureDone {
		if cerr := <-captureErr; err == nil {
			err = cerr
		}
	}
	close(stop)
	t.drain(schedsDone, cancelHard)
	<-flushDone
	return err
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
// most ShutdownTimeout, then cancels what is left (cancelHard).
func (t *term) drain(schedsDone <-chan struct{}, cancelHard context.CancelFunc) {
	defer cancelHard()
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
		cancelHard()
		<-schedsDone
	}
}

// close ends the term: the final checkpoint and slot position (with a fresh
// deadline; both only ever record what sinks acknowledged) unless the
// leadership was lost, whose successor owns them; then the plugins and the
// pool. It is safe on a term that openTerm gave up on.
func (t *term) close(ctx context.Context) {
	log := t.log
	// A term that lost its leadership leaves the source to whoever leads
	// now, who may be using what this start created.
	if t.setup != nil && !t.streaming && (t.lease == nil || t.lease.Err() == nil) {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if err := t.setup.Undo(uctx); err != nil {
			log.Warn("remove what this failed start created in the source", "err", err)
		}
		cancel()
	}
	if t.capt != nil && t.streaming {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if t.lost {
			t.capt.Abandon()
		} else {
			if serr := saveMarks(fctx, t.store, t.tracker, t.runs, true); serr != nil {
				log.Warn("final checkpoint", "err", serr)
			}
			if uerr := saveUsage(fctx, t.store, t.runs); uerr != nil {
				log.Warn("final usage", "err", uerr)
			}
			if cerr := t.capt.Close(fctx); cerr != nil {
				log.Warn("final slot confirmation", "err", cerr)
			}
		}
		cancel()
		marks := t.tracker.Peek()
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
			mark := marks[i]
			if r.iso != nil {
				// A detached sink's position is its catch-up stream's
				// (counted there, not here).
				if id, ok := r.iso.Watermark(); ok {
					mark = id
				}
			}
			log.Info("sink stopped", "sink", r.cfg.ID, "delivered", st.Delivered.Load(), "skipped", st.Skipped.Load(),
				"filtered", st.Filtered.Load(), "failed_attempts", st.Failures.Load(), "throttled", st.Throttles.Load(),
				"parked", st.Parked.Load(), "replayed", st.Replayed.Load(), "duplicates", st.Duplicates.Load(), "dropped", r.queue.Dropped(),
				"checkpoint", mark.String(), "unresolved", unresolved, "redelivered_next", ahead)
			if ahead > 0 && !t.lost {
				log.Info("sink stopped with deliveries past an undelivered event; the next run delivers them again",
					"sink", r.cfg.ID, "checkpoint", mark.String(), "unresolved", unresolved, "redelivered_next", ahead)
			}
		}
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
	store   *checkpoint.Store
	tracker *ack.Tracker
	runs    []*sinkRun
}

func (c checkpointsFirst) RaiseConfirmLimit(ctx context.Context, lsn uint64) error {
	// Watermarks read now are at least those lsn was derived from.
	if err := saveMarks(ctx, c.store, c.tracker, c.runs, true); err != nil {
		return err
	}
	return c.store.RaiseConfirmLimit(ctx, lsn)
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
	if err := f.lease.Confirm(ctx); err != nil {
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
