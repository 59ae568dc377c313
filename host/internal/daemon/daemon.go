// Package daemon wires one pipeline together and supervises it: capture →
// decode → fan-out → one scheduler per sink → plugin process, with the ack
// tracker feeding slot confirmations back to capture and watermarks to the
// checkpoint store.
//
// Shutdown order (on ctx end): stop reading from the slot, let every
// scheduler finish its batch in flight (bounded by ShutdownTimeout), write
// the final checkpoints, confirm the final position to PostgreSQL, close
// the plugins.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/walcast/walcast/host/internal/ack"
	"github.com/walcast/walcast/host/internal/backfill"
	"github.com/walcast/walcast/host/internal/capture"
	"github.com/walcast/walcast/host/internal/checkpoint"
	"github.com/walcast/walcast/host/internal/config"
	"github.com/walcast/walcast/host/internal/fanout"
	"github.com/walcast/walcast/host/internal/isolate"
	"github.com/walcast/walcast/host/internal/leader"
	"github.com/walcast/walcast/host/internal/schedule"
	"github.com/walcast/walcast/pluginkit"
)

// Plugin is a configured, open sink as the daemon uses it.
type Plugin interface {
	// Info is the plugin's description of itself.
	Info() pluginkit.Info
	// Deliver hands over a batch; ctx ends at the delivery timeout. It is
	// called concurrently for different rows unless Info().Ordered.
	Deliver(ctx context.Context, events []pluginkit.Event) (pluginkit.DeliverResult, error)
	Close(ctx context.Context) error
}

// Launcher starts, configures and opens the sink's plugin. The returned
// OpenResult may carry the destination's own checkpoint.
type Launcher func(ctx context.Context, sink *config.Sink) (Plugin, pluginkit.OpenResult, error)

// Options configures Run.
type Options struct {
	Pipeline *config.Pipeline
	Launch   Launcher
	Logger   *slog.Logger
	// ShutdownTimeout bounds how long in-flight deliveries may take to
	// finish after the stop signal. Default 30s.
	ShutdownTimeout time.Duration
	// CheckpointInterval is how often moved watermarks are written.
	// Default 250ms.
	CheckpointInterval time.Duration
	// Ready, when set, is called once streaming starts (tests, demo).
	Ready func()
	// NoLeadership skips the pipeline's leadership lock (tests that run a
	// pipeline's pieces on their own). walcast run always takes it.
	NoLeadership bool
	// MetricsListen, when set, is the address /metrics (Prometheus) and
	// /healthz are served on, e.g. "127.0.0.1:9187".
	MetricsListen string
	// AcceptGap replaces a lost, invalidated or foreign slot and records
	// the gap instead of refusing to start (walcast run --accept-gap).
	AcceptGap bool
	// WarnRetainedWAL is how much WAL (bytes) the slot may retain before
	// a warning is logged and walcast_slot_wal_at_risk is set. Default
	// 1 GiB; negative: only wal_status unreserved/lost warns.
	WarnRetainedWAL int64
	// SlotCheckInterval is how often the slot's WAL is checked. Default
	// 10s.
	SlotCheckInterval time.Duration
}

type sinkRun struct {
	cfg    *config.Sink
	plugin Plugin
	queue  *fanout.Queue
	sched  *schedule.Scheduler
	meter  *schedule.Meter
	// failed: a failure that stopped the sink is on record (shown by
	// walcast status); saveLoop clears it once the sink delivers again.
	failed bool
	// iso runs a durable sink through live, catching up and rejoining;
	// nil for sinks that never hold the slot back.
	iso *isolate.Sink
}

// Run runs the pipeline until ctx ends (a clean shutdown, returns nil) or
// something fails that retrying cannot fix. Only the leader of the pipeline
// streams (see host/internal/leader): Run stands by until it leads, and
// when it loses the leadership (its session ended: PostgreSQL restarted,
// the network, an administrator) it stops delivering at once and stands by
// again, for this process or another to take over.
func Run(ctx context.Context, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// A clear error when the source cannot be reached at all, before any
	// standing by.
	pool, err := Connect(ctx, opts.Pipeline.Source.DSN)
	if err != nil {
		return err
	}
	pool.Close()
	for {
		err := runOnce(ctx, opts)
		if !errors.Is(err, leader.ErrLost) || ctx.Err() != nil {
			return err
		}
		log.Warn("standing by again after losing the leadership; what was not acknowledged is delivered again by whoever leads next",
			"pipeline", opts.Pipeline.Name, "err", err)
	}
}

func runOnce(ctx context.Context, opts Options) (err error) {
	defer func() {
		// Stopped while still starting: nothing was streamed, nothing to
		// report.
		if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			err = nil
		}
	}()
	// The metrics server stops last, after the drain, the final
	// checkpoints and the plugins' Close, so all of it can be watched.
	stopMetrics := func() {}
	defer func() { stopMetrics() }()
	p := opts.Pipeline
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("pipeline", p.Name)
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 30 * time.Second
	}
	if opts.CheckpointInterval <= 0 {
		opts.CheckpointInterval = 250 * time.Millisecond
	}
	if opts.WarnRetainedWAL == 0 {
		opts.WarnRetainedWAL = 1 << 30
	}
	if opts.SlotCheckInterval <= 0 {
		opts.SlotCheckInterval = 10 * time.Second
	}

	// Only the leader streams: several walcast processes may run the same
	// pipeline, and all but one stand by until the leader's session ends.
	var lease *leader.Lease
	if !opts.NoLeadership {
		lease, err = leader.Acquire(ctx, leader.Config{DSN: p.Source.DSN, Pipeline: p.Name, Logger: log})
		if err != nil {
			return err
		}
		defer lease.Release(context.WithoutCancel(ctx))
		// Losing the session ends this run at once (below): a standby may
		// be taking over.
		var cancelLead context.CancelFunc
		ctx, cancelLead = context.WithCancel(ctx)
		defer cancelLead()
		go func() {
			select {
			case <-lease.Lost():
				cancelLead()
			case <-ctx.Done():
			}
		}()
	}

	pool, err := Connect(ctx, p.Source.DSN)
	if err != nil {
		return err
	}
	defer pool.Close()
	store := checkpoint.New(pool, p.Name)
	// Checkpoints are written through the leadership session, so that a
	// leader that lost it (paused, cut off) cannot move them any more.
	marksStore := store
	if lease != nil {
		marksStore = checkpoint.New(fenced{Pool: pool, lease: lease}, p.Name)
	}
	ccfg := capture.Config{
		DSN:             p.Source.DSN,
		Slot:            p.Source.Slot,
		Publication:     p.Source.Publication,
		Tables:          p.Source.Tables,
		AllowKeyless:    p.Source.AllowKeyless,
		ApplicationName: "walcast-" + p.Name,
		PrimaryKey:      capture.PrimaryKeyLookup(pool),
		Pipeline:        p.Name,
		Logger:          log,
	}
	for _, sk := range p.Sinks {
		ccfg.Sinks = append(ccfg.Sinks, sk.ID)
	}
	ccfg.AcceptGap = opts.AcceptGap
	if err := prepareBackfills(ctx, pool, p, log); err != nil {
		return err
	}

	// Plugins: launched, configured and opened before the slot and the
	// publication are created, so that a missing plugin, a checksum
	// mismatch or a config the plugin rejects fails the start without
	// leaving a slot that retains WAL.
	runs := make([]*sinkRun, 0, len(p.Sinks))
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, r := range runs {
			if cerr := r.plugin.Close(cctx); cerr != nil {
				log.Warn("close sink", "sink", r.cfg.ID, "err", cerr)
			}
		}
	}()
	specs := make([]ack.SinkSpec, 0, len(p.Sinks))
	skip := make([]pluginkit.EventID, 0, len(p.Sinks))
	for i := range p.Sinks {
		s := &p.Sinks[i]
		plugin, cp, err := startSink(ctx, opts.Launch, s)
		if plugin != nil {
			runs = append(runs, &sinkRun{cfg: s, plugin: plugin})
		}
		if err != nil {
			return err
		}
		specs = append(specs, ack.SinkSpec{ID: s.ID, Durable: s.Durable})
		skip = append(skip, cp)
	}

	prep, err := capture.Prepare(ctx, pool, store, ccfg)
	if err != nil {
		return fmt.Errorf("prepare source: %w", err)
	}
	streaming := false
	if prep.CreatedSlot && prep.AcceptedGap == nil {
		// A start that fails from here on drops the slot it created: it
		// would only retain WAL, and nothing was streamed from it.
		defer func() {
			if streaming {
				return
			}
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if derr := capture.DropCreatedSlot(dctx, pool, store, ccfg.Slot); derr != nil {
				log.Warn("drop the slot this failed start created", "slot", ccfg.Slot, "err", derr)
			} else {
				log.Info("dropped the replication slot this failed start created", "slot", ccfg.Slot)
			}
		}()
	}
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
	for _, t := range prep.Keyless {
		log.Warn("table has no key: only its inserts and truncates are captured (publication "+prep.KeylessPublication+"), with key null", "table", t)
	}
	if len(prep.Unlisted) > 0 {
		log.Warn("the publication also publishes tables that are not in source.tables; their changes are dropped (metric walcast_events_unlisted_total)",
			"publication", ccfg.Publication, "tables", strings.Join(prep.Unlisted, ", "))
	}
	ccfg.KeylessPublication = prep.KeylessPublication
	ccfg.StatusInterval = min(10*time.Second, prep.WalSenderTimeout/4)
	marks, err := store.Load(ctx)
	if err != nil {
		return err
	}
	slots := isolate.NewSlots(pool, p.Name, p.Source.Slot)
	if err := slots.Init(ctx); err != nil {
		return err
	}
	var durable []string
	for _, s := range p.Sinks {
		if s.Durable {
			durable = append(durable, s.ID)
		}
	}
	resume, err := slots.Recover(ctx, durable)
	if err != nil {
		return fmt.Errorf("recover catch-up slots: %w", err)
	}
	for i := range runs {
		// The destination's own checkpoint counts only when it is ahead.
		if through := marks[runs[i].cfg.ID]; through.Compare(skip[i]) > 0 {
			skip[i] = through
		}
	}

	failures, err := store.LoadSinkFailures(ctx)
	if err != nil {
		return err
	}
	for _, r := range runs {
		if f, ok := failures[r.cfg.ID]; ok {
			r.failed = true
			log.Warn("sink stopped the last run; delivering again", "sink", r.cfg.ID, "stopped_at", f.At, "err", f.Error)
		}
	}

	tracker := ack.New(specs, prep.ConfirmedFlush)
	deliverSeconds := newDeliverSeconds()
	// newSched returns a scheduler for sink r reading q and resolving into
	// sink index of t: the pipeline's tracker, or a catch-up stream's.
	newSched := func(r *sinkRun, q *fanout.Queue, t *ack.Tracker, index int, skip pluginkit.EventID) *schedule.Scheduler {
		scfg := ScheduleConfig(r.cfg, r.plugin.Info())
		scfg.Index = index
		scfg.SkipThrough = skip
		scfg.Parked = store
		scfg.Meter = r.meter
		scfg.Logger = log
		scfg.Observe = func(took time.Duration, outcome string) {
			deliverSeconds.WithLabelValues(r.cfg.ID, r.cfg.Type, outcome).Observe(took.Seconds())
		}
		return schedule.New(scfg, q, t, r.plugin)
	}
	queues := make([]*fanout.Queue, len(runs))
	for i, r := range runs {
		tracker.SetWatermark(i, skip[i])
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
		r.sched = newSched(r, r.queue, tracker, i, skip[i])
		log.Info("sink ready", "sink", r.cfg.ID, "type", r.cfg.Type, "durable", r.cfg.Durable, "resume_after", skip[i].String())
	}
	fan := fanout.New(tracker, queues)
	capt := capture.New(ccfg, fan)
	isolateSinks(runs, resume, slots, fan, tracker, prep.ConfirmedFlush, capt, ccfg, newSched, log)
	// Pauses hold from the first event on, not from the first poll.
	sinkIDs := make([]string, len(p.Sinks))
	for i := range p.Sinks {
		sinkIDs[i] = p.Sinks[i].ID
	}
	filler := backfill.NewRunner(backfill.Config{
		DSN: p.Source.DSN, Pipeline: p.Name, Tables: p.Source.Tables, Sinks: sinkIDs,
		Flushed: tracker.Flush, Logger: log,
	})
	ctl := &control{store: store, runs: runs, log: log, backfill: filler}
	if err := ctl.applyPauses(ctx); err != nil {
		return err
	}
	watch := newSlotWatch(pool, ccfg.Slot, opts.WarnRetainedWAL, opts.SlotCheckInterval, log)
	if opts.MetricsListen != "" {
		coll := newPipelineCollector(runs, tracker, fan, capt, slotRetainedWAL(pool, p.Source.Slot))
		coll.catchupRetained = catchupRetained(pool, p.Name)
		reg := newRegistry(p.Name, coll, deliverSeconds, watch.collectors()...)
		healthy := func() error {
			if !capt.Streaming() {
				return errors.New("replication stream down: connecting or reconnecting to PostgreSQL")
			}
			return nil
		}
		if stopMetrics, err = serveMetrics(opts.MetricsListen, p.Name, reg, healthy, log); err != nil {
			stopMetrics = func() {}
			return err
		}
	}

	// hard ends in-flight deliveries; it outlives ctx by ShutdownTimeout.
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	stop := make(chan struct{})
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }) }

	var sched errgroup.Group
	schedErr := make(chan error, len(runs))
	for _, r := range runs {
		sched.Go(func() error {
			err := r.run(hard, stop)
			if err != nil {
				if kind, _ := pluginkit.KindOf(err); kind == pluginkit.KindFatal {
					recordFailure(store, r.cfg.ID, err, log)
				}
				schedErr <- fmt.Errorf("sink %s: %w", r.cfg.ID, err)
			}
			return err
		})
	}
	flushDone := make(chan struct{})
	go func() {
		defer close(flushDone)
		saveLoop(hard, marksStore, tracker, runs, opts.CheckpointInterval, log)
	}()
	// The control listener and the slot watch are joined before Run
	// returns (defers run last in, first out: cancel, then wait).
	var background sync.WaitGroup
	defer background.Wait()
	controlCtx, stopControl := context.WithCancel(ctx)
	defer stopControl()
	background.Go(func() { ctl.listen(controlCtx, p.Source.DSN, 5*time.Second) })
	background.Go(func() { watch.run(controlCtx) })

	captureErr := make(chan error, 1)
	captureCtx, cancelCapture := context.WithCancel(ctx)
	defer cancelCapture()
	go func() { captureErr <- capt.Run(captureCtx) }()
	streaming = true
	// Backfills write into the WAL only while the stream runs, so that
	// their chunks are read back (and their window moves) promptly.
	fillDone := make(chan struct{})
	go func() {
		defer close(fillDone)
		filler.Run(captureCtx)
	}()
	if opts.Ready != nil {
		opts.Ready()
	}

	captureDone := false
	lost := false
	select {
	case <-ctx.Done():
		if lease != nil && lease.Err() != nil {
			// Not a shutdown: another walcast may lead now. Nothing more
			// is delivered, confirmed or checkpointed by this one.
			lost, err = true, lease.Err()
			cancelHard()
			break
		}
		log.Info("stopping: no new events; waiting for deliveries in flight", "timeout", opts.ShutdownTimeout)
	case err = <-captureErr:
		captureDone = true
		if err != nil {
			// Run returns err and the caller reports it, once.
			log.Info("stopping: the replication stream failed; waiting for deliveries in flight", "timeout", opts.ShutdownTimeout)
		}
	case err = <-schedErr:
		// A sink's scheduler cannot go on: stop everything rather than let
		// its queue fill and stall the stream silently. Run returns err
		// and the caller reports it, once.
		log.Info("stopping: a sink failed; waiting for deliveries in flight", "timeout", opts.ShutdownTimeout)
	}
	cancelCapture()
	<-fillDone
	if !captureDone {
		if cerr := <-captureErr; err == nil {
			err = cerr
		}
	}
	halt()
	done := make(chan struct{})
	go func() { sched.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(opts.ShutdownTimeout):
		log.Warn("deliveries still in flight at shutdown timeout; they will be replayed on restart")
		cancelHard()
		<-done
	}
	cancelHard()
	<-flushDone
	// Final checkpoint and slot position, with a fresh deadline: both only
	// ever record what sinks acknowledged. A run that lost leadership
	// writes neither: its successor owns them.
	fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if lost {
		capt.Abandon()
	} else {
		if serr := saveMarks(fctx, marksStore, tracker, runs, true); serr != nil {
			log.Warn("final checkpoint", "err", serr)
		}
		if uerr := saveUsage(fctx, store, runs); uerr != nil {
			log.Warn("final usage", "err", uerr)
		}
		if cerr := capt.Close(fctx); cerr != nil {
			log.Warn("final slot confirmation", "err", cerr)
		}
	}
	for _, r := range runs {
		st := r.stats()
		log.Info("sink stopped", "sink", r.cfg.ID, "delivered", st.Delivered.Load(), "skipped", st.Skipped.Load(),
			"filtered", st.Filtered.Load(), "failed_attempts", st.Failures.Load(), "throttled", st.Throttles.Load(),
			"parked", st.Parked.Load(), "replayed", st.Replayed.Load(), "duplicates", st.Duplicates.Load(), "dropped", r.queue.Dropped())
	}
	return err
}

// recordFailure puts the error that stopped a sink on record in the control
// plane, where `walcast status` shows it. It runs as the pipeline stops, so
// it has its own deadline.
func recordFailure(store *checkpoint.Store, sink string, err error, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The error itself is what Run returns, and the caller prints it once.
	log.Error("the sink stopped the pipeline; walcast status shows why", "sink", sink)
	if rerr := store.RecordSinkFailure(ctx, sink, err.Error()); rerr != nil {
		log.Warn("record sink failure", "sink", sink, "err", rerr)
	}
}

// clearRecovered forgets the recorded failure of every sink that has
// delivered since the start.
func clearRecovered(ctx context.Context, store *checkpoint.Store, runs []*sinkRun, log *slog.Logger) {
	for _, r := range runs {
		if !r.failed || r.stats().Delivered.Load() == 0 {
			continue
		}
		if err := store.ClearSinkFailure(ctx, r.cfg.ID); err != nil {
			log.Warn("clear sink failure", "sink", r.cfg.ID, "err", err)
			continue
		}
		r.failed = false
	}
}

func startSink(ctx context.Context, launch Launcher, s *config.Sink) (Plugin, pluginkit.EventID, error) {
	plugin, res, err := launch(ctx, s)
	if err != nil {
		return nil, pluginkit.EventID{}, fmt.Errorf("sink %s: %w", s.ID, err)
	}
	return plugin, res.Checkpoint, nil
}

func saveLoop(ctx context.Context, store *checkpoint.Store, tracker *ack.Tracker, runs []*sinkRun, every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for tick := 1; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		clearRecovered(ctx, store, runs, log)
		if err := saveMarks(ctx, store, tracker, runs, false); err != nil && ctx.Err() == nil {
			// The database may be restarting; the next tick tries again.
			log.Warn("write checkpoints", "err", err)
		}
		// Usage is for humans and bills: every couple of seconds is enough.
		if time.Duration(tick)*every >= 2*time.Second {
			tick = 0
			if err := saveUsage(ctx, store, runs); err != nil && ctx.Err() == nil {
				log.Warn("write usage", "err", err)
			}
		}
	}
}

func saveMarks(ctx context.Context, store *checkpoint.Store, tracker *ack.Tracker, runs []*sinkRun, force bool) error {
	wm, changed := tracker.Watermarks()
	marks := make(map[string]pluginkit.EventID, len(runs))
	for i, r := range runs {
		marks[r.cfg.ID] = wm[i]
		if r.iso == nil {
			continue
		}
		// A detached sink's position is its catch-up stream's.
		if id, ok := r.iso.Watermark(); ok {
			marks[r.cfg.ID] = id
			changed = true
		}
	}
	if !changed && !force {
		return nil
	}
	if err := store.Save(ctx, marks); err != nil {
		tracker.MarkChanged() // retry on the next tick
		return err
	}
	return nil
}

func saveUsage(ctx context.Context, store *checkpoint.Store, runs []*sinkRun) error {
	for _, r := range runs {
		us := r.meter.Take()
		if len(us) == 0 {
			continue
		}
		if err := store.AddUsage(ctx, us); err != nil {
			r.meter.Restore(us)
			return err
		}
	}
	return nil
}

// Connect opens the control connection pool of a pipeline's source.
func Connect(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	return capture.Connect(ctx, dsn, 4)
}

// ScheduleConfig is a sink's delivery policy as its scheduler takes it:
// the pipeline's delivery block, filters, and what the plugin requires.
// The daemon and the daemon-less walcast replay both use it.
func ScheduleConfig(s *config.Sink, info pluginkit.Info) schedule.Config {
	d := s.Delivery
	return schedule.Config{
		SinkID:      s.ID,
		BatchSize:   BatchSize(d, info),
		MaxInFlight: d.MaxInFlight,
		// A plugin that asks for order gets batches in commit order, one
		// at a time (the Kafka sink filters at or below its own
		// checkpoint, which is only sound that way); per-row order holds
		// all the same.
		Strict:         d.Ordering == config.OrderingStrict || info.Ordered,
		RateLimit:      d.RateLimit,
		RetryBase:      d.RetryBase,
		MaxAttempts:    d.MaxAttempts,
		DeliverTimeout: d.DeliverTimeout,
		Tables:         set(s.Tables),
		Ops:            set(s.Ops),
	}
}

// BatchSize is a sink's batch size: the delivery block's batch_size when
// it sets one, else the plugin's own (Info.BatchSize, within
// config.MaxBatchSize), else the default.
func BatchSize(d config.Delivery, info pluginkit.Info) int {
	if d.BatchSizeRange == nil && info.BatchSize > 0 {
		return min(info.BatchSize, config.MaxBatchSize)
	}
	return d.BatchSize
}

func set[T comparable](xs []T) map[T]bool {
	if len(xs) == 0 {
		return nil
	}
	m := make(map[T]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}

// fenced is the control plane with its writes going through the leadership
// session: they fail once that session is gone. Reads use the pool.
type fenced struct {
	*pgxpool.Pool
	lease *leader.Lease
}

func (f fenced) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return f.lease.Exec(ctx, sql, args...)
}
