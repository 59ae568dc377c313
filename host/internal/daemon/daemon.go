package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/config"
	controlplane "github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/host/internal/control/checkpoints"
	"github.com/walcast/walcast/host/internal/control/leader"
	"github.com/walcast/walcast/host/internal/control/reports"
	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/host/internal/delivery/fanout"
	"github.com/walcast/walcast/host/internal/delivery/isolate"
	"github.com/walcast/walcast/host/internal/delivery/schedule"
	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/host/internal/pg"
	"github.com/walcast/walcast/host/internal/source/capture"
	"github.com/walcast/walcast/pluginkit"
)

// Plugin is a configured, open sink as the daemon uses it.
type Plugin interface {
	// Info is the plugin's description of itself.
	Info() pluginkit.Info
	// Deliver hands over a batch; ctx ends at the delivery timeout. It is
	// called concurrently for different rows unless Info().Ordered.
	Deliver(ctx context.Context, batch attempt.Batch) (attempt.Result, error)
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
	// CheckpointInterval is how often moved positions are written as
	// checkpoints.
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
	// SlotCheckInterval is how often the slot's WAL and the publication's
	// tables are checked. Default 10s.
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
	// isolation runs a durable sink through live, catching up and
	// rejoining; nil for sinks that never hold the slot back.
	isolation *isolate.Sink
}

// The fan-out is the consumer the pipeline's capture hands its stream to;
// it is written against capture.Consumer without importing capture, which
// is upstream of it.
var _ capture.Consumer = (*fanout.Fanout)(nil)

// Run runs one pipeline until ctx ends (a clean shutdown, returns nil) or
// something fails that retrying cannot fix. Only the leader of the pipeline
// streams (see host/internal/control/leader): Run stands by until it leads, and
// when it loses the leadership (its session ended: PostgreSQL restarted,
// the network, an administrator) it stops delivering at once and stands by
// again, for this process or another to take over. It is RunInstance with
// one pipeline.
func Run(ctx context.Context, opts Options) error {
	p := opts.Pipeline
	opts.Pipeline = nil
	return RunInstance(ctx, InstanceOptions{Pipelines: []*config.Pipeline{p}, Options: opts})
}

// recordFailure puts the error that stopped a sink on record in the control
// plane, where `walcast status` shows it. It runs as the pipeline stops, so
// it has its own deadline.
func recordFailure(reportStore *reports.Store, sink string, err error, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The error itself is what Run returns, and the caller prints it once.
	log.Error("the sink stopped the pipeline; walcast status shows why", "sink", sink)
	if rerr := reportStore.RecordSinkFailure(ctx, sink, err.Error()); rerr != nil {
		log.Warn("record sink failure", "sink", sink, "err", rerr)
	}
}

// clearRecovered forgets the recorded failure of every sink that has
// delivered since the start.
func clearRecovered(ctx context.Context, reportStore *reports.Store, runs []*sinkRun, log *slog.Logger) {
	for _, r := range runs {
		if !r.failed || r.stats().Delivered.Load() == 0 {
			continue
		}
		if err := reportStore.ClearSinkFailure(ctx, r.cfg.ID); err != nil {
			log.Warn("clear sink failure", "sink", r.cfg.ID, "err", err)
			continue
		}
		r.failed = false
	}
}

func startSink(ctx context.Context, launch Launcher, s *config.Sink) (Plugin, pluginkit.OpenResult, error) {
	plugin, res, err := launch(ctx, s)
	if err != nil {
		return nil, pluginkit.OpenResult{}, fmt.Errorf("sink %s: %w", s.ID, err)
	}
	return plugin, res, nil
}

// saveLoop writes checkpoints every interval, usage and backlogs every
// couple of seconds, until ctx ends (nil). A failed write is tried again
// at the next tick (the database may be restarting), unless retrying
// cannot fix it (pg.Permanent: a privilege revoked): that error is
// returned, and stops the term.
func saveLoop(ctx context.Context, checkpointStore *checkpoints.Store, reportStore *reports.Store, tracker *ack.Tracker, runs []*sinkRun, every time.Duration, log *slog.Logger) error {
	t := time.NewTicker(every)
	defer t.Stop()
	failed := func(what string, err error) error {
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if pg.Permanent(err) {
			return fmt.Errorf("%s: %w", what, err)
		}
		log.Warn(what, "err", err)
		return nil
	}
	for tick := 1; ; tick++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		clearRecovered(ctx, reportStore, runs, log)
		if err := failed("write checkpoints", saveCheckpoints(ctx, checkpointStore, tracker, runs, false)); err != nil {
			return err
		}
		// Usage is for humans and bills: every couple of seconds is enough.
		if time.Duration(tick)*every >= 2*time.Second {
			tick = 0
			if err := failed("write usage", saveUsage(ctx, reportStore, runs)); err != nil {
				return err
			}
			if err := failed("write sink backlogs", saveBacklogs(ctx, reportStore, tracker, runs)); err != nil {
				return err
			}
		}
	}
}

// saveCheckpoints writes every sink's position as its checkpoint when one
// moved since the last write (always with force).
func saveCheckpoints(ctx context.Context, checkpointStore *checkpoints.Store, tracker *ack.Tracker, runs []*sinkRun, force bool) error {
	positions, changed := tracker.PositionsToSave()
	checkpoints := make(map[string]pluginkit.EventID, len(runs))
	for i, r := range runs {
		checkpoints[r.cfg.ID] = positions[i]
		if r.isolation == nil {
			continue
		}
		// A detached sink's position is its catch-up stream's.
		if id, ok := r.isolation.Position(); ok {
			checkpoints[r.cfg.ID] = id
			changed = true
		}
	}
	if !changed && !force {
		return nil
	}
	if err := checkpointStore.Save(ctx, checkpoints); err != nil {
		tracker.MarkUnsaved() // retry on the next tick
		return err
	}
	return nil
}

// saveBacklogs reports each sink's backlog for `walcast status`, which runs
// in another process and cannot ask this one.
func saveBacklogs(ctx context.Context, reportStore *reports.Store, tracker *ack.Tracker, runs []*sinkRun) error {
	backlogs := make(map[string]reports.Backlog, len(runs))
	for i, r := range runs {
		events, bytes, oldest := sinkBacklog(tracker, i, r)
		backlogs[r.cfg.ID] = reports.Backlog{Events: int64(events), Bytes: bytes, Oldest: oldest}
	}
	return reportStore.ReportBacklogs(ctx, backlogs)
}

func saveUsage(ctx context.Context, reportStore *reports.Store, runs []*sinkRun) error {
	for _, r := range runs {
		us := r.meter.Take()
		if len(us) == 0 {
			continue
		}
		if err := reportStore.AddUsage(ctx, us); err != nil {
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
		ThrottleMin:    d.ThrottleMin,
		ThrottleMax:    d.ThrottleMax,
		Tables:         set(s.Tables),
		Ops:            set(s.Ops),
		Rules:          s.Rules.Compiled,
		Outbox:         s.OutboxRouter(),
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

// controlDB is the control plane as a term reads and writes it: the pool,
// or fenced.
type controlDB interface {
	controlplane.Querier
	Begin(ctx context.Context) (pgx.Tx, error)
}

// fenced is the control plane with its writes (statements and
// transactions) going through the leadership session: they fail once that
// session is gone. Reads use the pool.
type fenced struct {
	*pgxpool.Pool
	lease *leader.Lease
}

var _ controlDB = fenced{}

func (f fenced) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return f.lease.Exec(ctx, sql, args...)
}

func (f fenced) Begin(ctx context.Context) (pgx.Tx, error) {
	return f.lease.Begin(ctx)
}
