// Package schedule runs one sink's deliveries: it takes events from the
// sink's queue, resolves the ones the sink must not see (already delivered
// before a restart, filtered out), batches the rest, calls Deliver and
// retries with backoff until the batch is delivered. Only a resolved
// Deliver is recorded as an acknowledgement in the tracker.
//
// Event states for one sink: queued → in flight → resolved. Nothing is ever
// dropped: a batch that keeps failing is retried until it succeeds or the
// scheduler is stopped, and then PostgreSQL replays it after a restart.
package schedule

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/walcast/walcast/host/ack"
	"github.com/walcast/walcast/host/fanout"
	"github.com/walcast/walcast/pluginkit"
)

// Deliverer is the sink as the scheduler sees it (the plugin client).
type Deliverer interface {
	// Deliver hands over a batch; ctx ends at the delivery timeout.
	Deliver(ctx context.Context, events []pluginkit.Event) (pluginkit.DeliverResult, error)
}

// Config is one sink's delivery policy.
type Config struct {
	SinkID string
	// Index is the sink's index in the tracker.
	Index     int
	BatchSize int
	// RetryBase is the first backoff; it doubles per failed attempt up to
	// MaxRetryDelay, with ±10% jitter.
	RetryBase      time.Duration
	MaxRetryDelay  time.Duration
	DeliverTimeout time.Duration
	// MaxBatchBytes caps the payload bytes of one Deliver (default 16 MiB)
	// so a batch of large rows stays well inside the gRPC message limit;
	// a single larger event still goes alone.
	MaxBatchBytes int
	// SkipThrough: events at or below it were delivered before (the sink's
	// checkpoint); they are resolved without being delivered again.
	SkipThrough pluginkit.EventID
	// Tables ("schema.table") and Ops, when non-empty, select the events
	// the sink receives; the others are resolved without delivery.
	Tables map[string]bool
	Ops    map[pluginkit.Op]bool
	Logger *slog.Logger
}

// Stats are cumulative counters, safe to read concurrently.
type Stats struct {
	Delivered  atomic.Int64
	Skipped    atomic.Int64
	Filtered   atomic.Int64
	Attempts   atomic.Int64
	Failures   atomic.Int64
	Duplicates atomic.Int64
}

// Scheduler delivers one sink's queue.
type Scheduler struct {
	cfg     Config
	queue   *fanout.Queue
	tracker *ack.Tracker
	sink    Deliverer
	log     *slog.Logger
	Stats   Stats
}

// New returns a scheduler; call Run.
func New(cfg Config, queue *fanout.Queue, tracker *ack.Tracker, sink Deliverer) *Scheduler {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 100
	}
	if cfg.RetryBase <= 0 {
		cfg.RetryBase = 30 * time.Second
	}
	if cfg.MaxRetryDelay <= 0 {
		cfg.MaxRetryDelay = max(10*time.Minute, cfg.RetryBase)
	}
	if cfg.DeliverTimeout <= 0 {
		cfg.DeliverTimeout = 2 * time.Minute
	}
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = 16 << 20
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Scheduler{cfg: cfg, queue: queue, tracker: tracker, sink: sink, log: log.With("sink", cfg.SinkID)}
}

// Run delivers until stop is closed (it then finishes the batch in flight
// and returns) or ctx ends (it abandons the batch in flight: those events
// stay unresolved and are replayed after a restart).
func (s *Scheduler) Run(ctx context.Context, stop <-chan struct{}) error {
	batch := make([]fanout.Item, 0, s.cfg.BatchSize)
	events := make([]pluginkit.Event, 0, s.cfg.BatchSize)
	seqs := make([]ack.Seq, 0, s.cfg.BatchSize)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			return nil
		case <-stop:
			return nil
		case it := <-s.queue.C:
			batch = append(batch, it)
		}
		// Take what is already queued, up to a batch; never wait for more.
		size := len(batch[0].Event.Payload)
	fill:
		for len(batch) < s.cfg.BatchSize && size < s.cfg.MaxBatchBytes {
			select {
			case it := <-s.queue.C:
				batch = append(batch, it)
				size += len(it.Event.Payload)
			default:
				break fill
			}
		}
		events, seqs = events[:0], seqs[:0]
		var resolved []ack.Seq
		for _, it := range batch {
			switch {
			case it.Event.ID.Compare(s.cfg.SkipThrough) <= 0:
				s.Stats.Skipped.Add(1)
				resolved = append(resolved, it.Seq)
			case !s.wants(it.Event):
				s.Stats.Filtered.Add(1)
				resolved = append(resolved, it.Seq)
			default:
				events = append(events, it.Event)
				seqs = append(seqs, it.Seq)
			}
		}
		if len(resolved) > 0 {
			s.tracker.Resolve(s.cfg.Index, resolved...)
		}
		if len(events) == 0 {
			continue
		}
		if !s.deliver(ctx, events) {
			return nil
		}
		s.tracker.Resolve(s.cfg.Index, seqs...)
	}
}

func (s *Scheduler) wants(ev pluginkit.Event) bool {
	if len(s.cfg.Ops) > 0 && !s.cfg.Ops[ev.Op] {
		return false
	}
	if len(s.cfg.Tables) > 0 && !s.cfg.Tables[ev.Schema+"."+ev.Table] {
		return false
	}
	return true
}

// deliver retries one batch until it is delivered (true) or ctx ends
// (false).
func (s *Scheduler) deliver(ctx context.Context, events []pluginkit.Event) bool {
	failures := 0
	for {
		s.Stats.Attempts.Add(1)
		dctx, cancel := context.WithTimeout(ctx, s.cfg.DeliverTimeout)
		res, err := s.sink.Deliver(dctx, events)
		cancel()
		if err == nil {
			s.Stats.Delivered.Add(int64(len(events) - res.Duplicates))
			s.Stats.Duplicates.Add(int64(res.Duplicates))
			if failures > 0 {
				s.log.Info("delivery recovered", "after_failures", failures, "first", events[0].ID.String())
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		kind, pause := pluginkit.KindOf(err)
		if kind == pluginkit.KindThrottled {
			s.log.Info("sink throttled; pausing", "pause", pause, "err", err)
		} else {
			failures++
			s.Stats.Failures.Add(1)
			pause = s.backoff(failures)
			// The full policy (max_attempts, parking) is applied by a
			// later stage; until then nothing is ever given up on.
			s.log.Warn("delivery failed; retrying", "kind", kind.String(), "attempt", failures,
				"first", events[0].ID.String(), "last", events[len(events)-1].ID.String(), "events", len(events),
				"retry_in", pause, "err", err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

func (s *Scheduler) backoff(failures int) time.Duration {
	d := s.cfg.RetryBase
	for i := 1; i < failures && d < s.cfg.MaxRetryDelay; i++ {
		d *= 2
	}
	d = min(d, s.cfg.MaxRetryDelay)
	jitter := time.Duration(rand.Int64N(int64(d)/5+1)) - d/10
	return d + jitter
}
