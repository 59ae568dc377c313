package schedule

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/host/internal/delivery/fanout"
	"github.com/walcast/walcast/host/internal/delivery/outbox"
	"github.com/walcast/walcast/host/internal/delivery/rules"
	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Deliverer is the sink as the scheduler sees it (the plugin client). It
// must allow concurrent calls when MaxInFlight > 1.
type Deliverer interface {
	// Deliver hands over a batch; ctx ends at the delivery timeout. See
	// package attempt for what the result and the error mean.
	Deliver(ctx context.Context, batch attempt.Batch) (attempt.Result, error)
}

// ParkStore persists parked events (walcast.parked).
type ParkStore interface {
	Park(ctx context.Context, ps []parking.Event) error
	Unpark(ctx context.Context, sink string, ids []cdc.EventID) error
	ParkedRows(ctx context.Context, sink string) ([]string, error)
	ListParked(ctx context.Context, sink, row string) ([]parking.Event, error)
	// ListParkedTable returns the parked events of one table, in id order.
	ListParkedTable(ctx context.Context, sink, schema, table string) ([]parking.Event, error)
	ParkedRowOf(ctx context.Context, sink string, id cdc.EventID) (string, error)
}

// Config is one sink's delivery policy.
type Config struct {
	SinkID string
	// Index is the sink's index in the tracker.
	Index     int
	BatchSize int
	// MaxBatchBytes caps the payload bytes of one Deliver (default 16 MiB)
	// so a batch of large rows stays well inside the gRPC message limit;
	// a single larger event still goes alone.
	MaxBatchBytes int
	// MaxInFlight batches may be delivered at once (ordering "row").
	MaxInFlight int
	// Strict keeps one batch in flight in global commit order.
	Strict bool
	// RateLimit is events per second; 0 means unlimited.
	RateLimit float64
	// RetryBase is the first backoff; it doubles per failed attempt up to
	// MaxRetryDelay, with ±10% jitter.
	RetryBase      time.Duration
	MaxRetryDelay  time.Duration
	MaxAttempts    int
	DeliverTimeout time.Duration
	// ThrottleMin and ThrottleMax bound the pause a throttled sink asks
	// for (an HTTP Retry-After): a shorter one (0, or a date already
	// past) is raised to ThrottleMin, doubled over consecutive throttles,
	// and a longer one is cut to ThrottleMax. Defaults: 1 s and 10 min.
	ThrottleMin, ThrottleMax time.Duration
	// Position is the sink's position: events at or below it were
	// delivered before (the sink's checkpoint); they are resolved without
	// being delivered again.
	Position cdc.EventID
	// Epoch names the series the ids of the events delivered belong to
	// (attempt.Batch.Epoch); empty when unknown.
	Epoch string
	// Tables ("schema.table") and Ops, when non-empty, select the events
	// the sink receives; the others are resolved without delivery.
	Tables map[string]bool
	Ops    map[cdc.Op]bool
	// Rules, when set, are the sink's filter, route and transform: an
	// event the filter rejects is resolved without delivery, one on which
	// an expression fails is parked with the error, and the sink receives
	// every other event transformed. The scheduler orders, parks and
	// replays the event as captured (its row is the captured key, and
	// walcast.parked keeps the captured envelope), so a replay applies
	// the rules of the file the daemon runs with then.
	Rules *rules.Rules
	// Outbox, when set, turns the events of the sink's outbox table into
	// the events the application inserted there (package outbox) instead
	// of applying Rules to them: an insert is delivered as its outbox
	// event, in its aggregate's lane (one aggregate, one row lane:
	// entry.row is the aggregate, and walcast.parked keeps it); anything
	// else of the table is resolved without delivery; a row the outbox
	// cannot read is parked with the error.
	Outbox *outbox.Router
	// Parked persists parked events; nil disables parking (events are
	// retried forever), which library-style callers may want.
	Parked ParkStore
	Meter  *Meter
	Logger *slog.Logger
	// Observe, when set, is told how long each Deliver took and how it
	// ended (for metrics): "ok", or the name of the failure's
	// attempt.Kind; for an answer naming failed events, the first one's.
	Observe func(elapsed time.Duration, outcome string)
}

// Stats are cumulative counters, safe to read concurrently.
type Stats struct {
	Delivered  atomic.Int64
	Bytes      atomic.Int64 // payload bytes of delivered events
	Skipped    atomic.Int64
	Filtered   atomic.Int64
	Attempts   atomic.Int64
	Failures   atomic.Int64
	Throttles  atomic.Int64
	Duplicates atomic.Int64
	Parked     atomic.Int64
	Replayed   atomic.Int64

	// Gauges.
	Held        atomic.Int64 // events pending or in flight
	InFlight    atomic.Int64 // batches in flight
	LastSuccess atomic.Int64 // Unix nanoseconds of the last successful Deliver
}

// Scheduler delivers one sink's queue.
type Scheduler struct {
	cfg     Config
	queue   *fanout.Queue
	tracker *ack.Tracker
	sink    Deliverer
	log     *slog.Logger
	replays chan replayReq
	// exited is closed when Run returns.
	exited chan struct{}
	Stats  Stats

	// paused is set by an operator (walcast pause); wake tells Run.
	paused atomic.Bool
	wake   chan struct{}

	// Owned by the Run goroutine.
	pending *pending
	// parked: the rows with events in walcast.parked (a table's truncates
	// under its truncate row), kept until a replay leaves none of them.
	parked    parkedSet
	replaying map[string]bool      // parked rows whose events are being replayed
	replayIDs map[cdc.EventID]bool // replayed events pending or in flight
	waiters   []*replayWaiter
	window    int // events held at most: pending plus in flight (lookAhead)
	bucket    *bucket
	// pausedUntil ends the pause a throttle asked for.
	pausedUntil time.Time
	// throttle is the state of the sink's throttling (throttle.go).
	throttle throttleState
	// gapForNext is a gap flag whose event the sink does not receive
	// (filtered out, skipped): the next event it receives carries it.
	gapForNext bool
	// inFlightBatches are the batches being delivered, holding
	// inFlightEvents events of inFlightBytes payload bytes.
	inFlightBatches int
	inFlightEvents  int
	inFlightBytes   int
	idleSince       time.Time // when the last batch in flight landed
	// acceptedAt is when Run took the events it is accepting from the
	// queue: one clock read per burst.
	acceptedAt time.Time
	results    chan result
	// deliveries counts the delivery goroutines; Run waits for them
	// before it returns, so no Deliver outlives the scheduler.
	deliveries sync.WaitGroup
	// eventBufs holds *[]cdc.Event for deliver to reuse (eventsBuf).
	eventBufs sync.Pool
}

// New returns a scheduler; call Run.
func New(cfg Config, queue *fanout.Queue, tracker *ack.Tracker, sink Deliverer) *Scheduler {
	cfg = withDefaults(cfg)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Scheduler{
		cfg: cfg, queue: queue, tracker: tracker, sink: sink,
		log:       log.With("sink", cfg.SinkID),
		replays:   make(chan replayReq),
		exited:    make(chan struct{}),
		wake:      make(chan struct{}, 1),
		pending:   newPending(),
		parked:    newParkedSet(),
		replaying: map[string]bool{},
		replayIDs: map[cdc.EventID]bool{},
		window:    lookAhead(cfg.MaxInFlight, cfg.BatchSize),
		results:   make(chan result, cfg.MaxInFlight),
	}
	if cfg.RateLimit > 0 {
		s.bucket = newBucket(cfg.RateLimit, time.Now())
	}
	return s
}

// withDefaults fills in what cfg leaves unset.
func withDefaults(cfg Config) Config {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 100
	}
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = 16 << 20
	}
	if cfg.MaxInFlight <= 0 || cfg.Strict {
		cfg.MaxInFlight = 1
	}
	if cfg.RetryBase <= 0 {
		cfg.RetryBase = 30 * time.Second
	}
	if cfg.MaxRetryDelay <= 0 {
		cfg.MaxRetryDelay = max(time.Hour, cfg.RetryBase)
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 5
	}
	if cfg.DeliverTimeout <= 0 {
		cfg.DeliverTimeout = 2 * time.Minute
	}
	if cfg.ThrottleMin <= 0 {
		cfg.ThrottleMin = time.Second
	}
	if cfg.ThrottleMax <= 0 {
		cfg.ThrottleMax = 10 * time.Minute
	}
	cfg.ThrottleMax = max(cfg.ThrottleMax, cfg.ThrottleMin)
	return cfg
}

// maxLookAhead caps the window of a sink whose lanes times batch size is
// large: beyond about four batches in flight or filling, a lane only waits
// for CPU the others use, while every held event costs memory in the host
// and the plugin (measured: docs/benchmarks.md, "Where the scheduler's
// constants come from").
const maxLookAhead = 4096

// lookAhead is how many events a scheduler holds, pending plus in flight:
// every lane full plus one batch ready for the first lane that frees up,
// at most maxLookAhead but always two full batches (one in flight, one
// filling). In-flight events count: they are held until they land, and
// counting only the pending ones would double what a sink with many lanes
// keeps in memory without making it any faster.
func lookAhead(lanes, batchSize int) int {
	return max(min((lanes+1)*batchSize, maxLookAhead), 2*batchSize, 1024)
}

// Paused reports whether an operator paused the sink.
func (s *Scheduler) Paused() bool { return s.paused.Load() }

// SetPaused stops or resumes starting new deliveries. Batches in flight
// finish; events keep arriving until the look-ahead window is full, and
// then the sink's queue holds the stream back like any slow durable sink.
// It may be called before and while Run runs.
func (s *Scheduler) SetPaused(paused bool) {
	if s.paused.Swap(paused) != paused {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// Run delivers until stop is closed (it then lets the batches in flight
// finish and returns) or ctx ends (it abandons them: those events stay
// unresolved and are replayed by PostgreSQL after a restart). It returns
// only once every Deliver it started has returned: when it stops for an
// error, the deliveries still in flight are cancelled first.
//
// Each turn of its loop starts what batches it may (dispatch), then waits
// for one thing to happen (next): an event, a landed batch, a replay
// request, an operator's pause, or the time a waiting batch may go.
func (s *Scheduler) Run(ctx context.Context, stop <-chan struct{}) error {
	// A delivery never blocks on its result (results holds MaxInFlight),
	// and once its context ends a Deliver returns promptly (the sink's
	// contract), so the wait is short.
	deliverCtx, cancelDeliveries := context.WithCancel(ctx)
	defer s.exit()
	defer s.deliveries.Wait()
	defer cancelDeliveries()
	if err := s.loadParkedRows(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	l := &loop{stop: stop, timer: time.NewTimer(time.Hour), paused: s.paused.Load()}
	defer l.timer.Stop()
	if l.paused {
		s.log.Info("sink paused by an operator: no deliveries until walcast resume")
	}
	for {
		if ctx.Err() != nil {
			return nil
		}
		var wake time.Time
		if !l.stopping {
			var err error
			if wake, err = s.dispatch(deliverCtx); err != nil {
				return err
			}
		} else if s.inFlightBatches == 0 {
			return nil // stopping, and the last batch landed
		}
		s.Stats.Held.Store(int64(s.held()))
		s.Stats.InFlight.Store(int64(s.inFlightBatches))
		if done, err := s.next(ctx, l, wake); done || err != nil {
			return err
		}
	}
}

// loop is Run's state between turns.
type loop struct {
	stop <-chan struct{}
	// stopping: stop was closed; the scheduler takes nothing new and
	// waits for its batches in flight.
	stopping bool
	timer    *time.Timer
	paused   bool // the operator's pause, as last logged
}

// loadParkedRows reads which rows have parked events, so that arriving
// events of those rows park behind them.
func (s *Scheduler) loadParkedRows(ctx context.Context) error {
	if s.cfg.Parked == nil {
		return nil
	}
	var rows []string
	err := retryStore(ctx, s.log, func(ctx context.Context) (err error) {
		rows, err = s.cfg.Parked.ParkedRows(ctx, s.cfg.SinkID)
		return err
	})
	if err != nil {
		return fmt.Errorf("load the rows with parked events: %w", err)
	}
	for _, r := range rows {
		s.parked.add(r)
	}
	return nil
}

// next waits for one thing to happen and handles it. done means Run
// returns, with err.
func (s *Scheduler) next(ctx context.Context, l *loop, wake time.Time) (done bool, err error) {
	stopping := l.stopping
	var queue <-chan fanout.Item
	if !stopping && s.room() {
		queue = s.queue.C
	}
	// A stopping scheduler takes no replay: it would never deliver it.
	replays := s.replays
	if stopping {
		replays = nil
	}
	armTimer(l.timer, wake)
	select {
	case <-ctx.Done():
		return true, nil
	case <-l.stop:
		l.stopping, l.stop = true, nil
	case it := <-queue:
		return false, s.acceptBurst(ctx, it)
	case r := <-s.results:
		return false, s.landed(ctx, r)
	case req := <-replays:
		if err := s.startReplay(ctx, req); err != nil {
			s.log.Error("replay", "err", err)
			if req.done != nil {
				req.done <- err
			}
		}
	case <-s.wake:
		s.notePause(l)
	case <-l.timer.C:
	}
	return false, nil
}

// acceptBurst accepts it and whatever else is queued right away, so
// that batches fill.
func (s *Scheduler) acceptBurst(ctx context.Context, it fanout.Item) error {
	s.acceptedAt = time.Now()
	if err := s.accept(ctx, it); err != nil {
		return err
	}
	for s.room() {
		select {
		case it := <-s.queue.C:
			if err := s.accept(ctx, it); err != nil {
				return err
			}
		default:
			return nil
		}
	}
	return nil
}

// landed takes a batch back from its delivery and applies the outcome.
func (s *Scheduler) landed(ctx context.Context, r result) error {
	s.inFlightBatches--
	if s.inFlightBatches == 0 {
		s.idleSince = time.Now()
	}
	s.inFlightEvents -= len(r.batch)
	s.inFlightBytes -= r.bytes
	return s.land(ctx, r)
}

// notePause logs a change of the operator's pause.
func (s *Scheduler) notePause(l *loop) {
	p := s.paused.Load()
	if p == l.paused {
		return
	}
	l.paused = p
	if p {
		s.log.Info("sink paused by an operator: no new deliveries until walcast resume", "in_flight", s.inFlightBatches)
	} else {
		s.log.Info("sink resumed")
	}
}

// held is how many events the scheduler holds: pending and in flight.
func (s *Scheduler) held() int { return s.pending.len() + s.inFlightEvents }

// room reports whether the scheduler may take more events from its queue:
// fewer than the window, and fewer payload bytes than maxHeldBytes, so
// that a table of large rows cannot multiply the window into gigabytes.
func (s *Scheduler) room() bool {
	return s.held() < s.window && s.pending.bytes+s.inFlightBytes < s.maxHeldBytes()
}

// maxHeldBytes bounds the payload bytes a scheduler holds: four full
// batches by bytes (64 MiB by default); small rows never reach it.
func (s *Scheduler) maxHeldBytes() int { return 4 * s.cfg.MaxBatchBytes }

func armTimer(t *time.Timer, at time.Time) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	d := time.Hour
	if !at.IsZero() {
		d = max(time.Until(at), time.Millisecond)
	}
	t.Reset(d)
}

// accept takes one event from the queue: resolves it at once when the sink
// must not see it, parks it behind its row's parked event, or makes it
// pending.
func (s *Scheduler) accept(ctx context.Context, it fanout.Item) error {
	s.queue.Took(it)
	ev := it.Event
	gap := it.GapBefore || s.gapForNext
	s.gapForNext = false
	switch {
	case ev.ID.Compare(s.cfg.Position) <= 0:
		s.Stats.Skipped.Add(1)
		s.tracker.Resolve(s.cfg.Index, it.Seq)
		s.gapForNext = gap
		return nil
	case !s.wants(ev):
		s.Stats.Filtered.Add(1)
		s.tracker.Resolve(s.cfg.Index, it.Seq)
		s.gapForNext = gap
		return nil
	}
	e := newEntry(ev, it.OldKey)
	e.seq, e.gapBefore, e.queued = it.Seq, gap, s.acceptedAt
	keep, ruleErr := s.applyRules(e, it.OldKey)
	if !keep {
		s.Stats.Filtered.Add(1)
		s.tracker.Resolve(s.cfg.Index, it.Seq)
		s.gapForNext = gap
		return nil
	}
	reason := s.parkedBehind(e)
	if reason == "" && ruleErr != nil {
		reason = ruleErr.Error()
		s.log.Error("event parked: an expression or the outbox of the sink failed on it", "event", ev.ID.String(),
			"table", ev.Schema+"."+ev.Table, "err", ruleErr)
	}
	if reason != "" {
		s.gapForNext = gap
		join := s.replayHolding(e)
		if err := s.park(ctx, []*entry{e}, reason, false); err != nil {
			return err
		}
		if join != nil {
			s.joinReplay(e, join)
		}
		return nil
	}
	s.pending.add(e)
	return nil
}

// applyRules sets what the sink receives of e (e.out) by the sink's
// rules. keep is false when the filter rejects the event; err is an
// expression's failure (e is then to be parked as captured).
func (s *Scheduler) applyRules(e *entry, oldKey []byte) (keep bool, err error) {
	if s.cfg.Outbox.Covers(&e.ev) {
		return s.applyOutbox(e)
	}
	if s.cfg.Rules == nil {
		return true, nil
	}
	res, err := s.cfg.Rules.Apply(e.ev, oldKey)
	if err != nil {
		return true, err
	}
	if !res.Keep {
		return false, nil
	}
	out := res.Event
	e.out, e.bytes = &out, len(out.Payload)
	return true, nil
}

// applyOutbox sets what the sink receives of e, an event of the outbox
// table, and puts a live event in its aggregate's lane. A replayed event
// keeps the row it was parked under (replay's bookkeeping is by that
// row); a row parked before its aggregate id was known stays in its own.
func (s *Scheduler) applyOutbox(e *entry) (keep bool, err error) {
	res, err := s.cfg.Outbox.Apply(e.ev)
	if res.Lane != nil && !e.replay {
		e.row = rowOf(e.ev, res.Lane)
		e.table = e.row[:len(e.table)]
	}
	if err != nil {
		return true, err
	}
	if !res.Keep {
		return false, nil
	}
	out := res.Event
	e.out, e.bytes = &out, len(out.Payload)
	return true, nil
}

func (s *Scheduler) wants(ev cdc.Event) bool {
	if len(s.cfg.Ops) > 0 && !s.cfg.Ops[ev.Op] {
		return false
	}
	// A message event concerns no table: the tables filter does not
	// apply to it (ops does).
	if len(s.cfg.Tables) > 0 && ev.Op != cdc.OpMessage && !s.cfg.Tables[ev.Schema+"."+ev.Table] {
		return false
	}
	return true
}

// linger is how long a partial batch waits for more events when the sink
// is busy. Without it a sink whose batches land quickly gets one small
// batch per landing, and every Deliver costs the same fixed work (a gRPC
// call, a request, a transaction) whatever its size: on a loaded machine
// that fixed cost slows the capture down, which keeps the batches small.
// Waiting lets a batch fill with what capture reads meanwhile (measured:
// docs/benchmarks.md, "Where the scheduler's constants come from"). A
// sink that has been idle for linger gets a partial batch at once: at a
// low rate there is nothing to wait for.
const linger = 2 * time.Millisecond

// lingerUntil returns when a partial batch may go, zero if it may go now:
// a full batch (by events or bytes) goes at once, a partial one once its
// oldest event has waited linger, or at once to a sink idle for linger.
func (s *Scheduler) lingerUntil(now time.Time, limit limits) time.Time {
	if s.pending.len() >= limit.events || s.pending.bytes >= limit.bytes {
		return time.Time{}
	}
	if s.inFlightBatches == 0 && now.Sub(s.idleSince) >= linger {
		return time.Time{}
	}
	if at := s.pending.list[0].queued.Add(linger); now.Before(at) {
		return at
	}
	return time.Time{}
}

// dispatch starts as many batches as lanes, pause and rate limit allow,
// and returns when the next one could start (zero: on the next event or
// result).
func (s *Scheduler) dispatch(ctx context.Context) (time.Time, error) {
	var wake time.Time
	if s.paused.Load() {
		return wake, nil
	}
	for s.inFlightBatches < s.throttle.lanes(s.cfg.MaxInFlight) && s.pending.len() > 0 {
		now := time.Now()
		if now.Before(s.pausedUntil) {
			return s.pausedUntil, nil
		}
		limit := limits{events: s.cfg.BatchSize, bytes: s.cfg.MaxBatchBytes, strict: s.cfg.Strict}
		if s.bucket != nil {
			n, at := s.bucket.available(now)
			if n < 1 {
				return at, nil
			}
			limit.events = min(limit.events, n)
		}
		if at := s.lingerUntil(now, limit); !at.IsZero() {
			return at, nil
		}
		batch, ready := s.pending.take(now, limit)
		if len(batch) == 0 {
			return ready, nil
		}
		wake = ready
		if s.bucket != nil {
			s.bucket.take(len(batch))
		}
		s.start(ctx, batch)
	}
	return wake, nil
}

// start delivers batch in a goroutine of its own.
func (s *Scheduler) start(ctx context.Context, batch []*entry) {
	size := 0
	for _, e := range batch {
		size += e.bytes
	}
	s.inFlightBatches++
	s.inFlightEvents += len(batch)
	s.inFlightBytes += size
	gen := s.throttle.gen
	s.deliveries.Go(func() { s.deliver(ctx, batch, size, gen) })
}
