// Package schedule runs one sink's deliveries: the sink's filter, batching,
// per-row ordering lanes, rate limit, retries with backoff, isolation of
// failing rows, parking and replay. It calls Deliver and records an
// acknowledgement in the tracker only once Deliver has resolved.
//
// Event states, for one sink:
//
//	queued → pending → in flight → delivered            (resolved)
//	                 ↘ filtered out / skipped           (resolved)
//	                   in flight → failed → pending (backing off, isolated)
//	                                      → parked      (resolved)
//
// Invariants: two events of the same row (schema.table + key) are never in
// flight at once and never delivered out of commit order (an update that
// changes the key belongs to both rows); a truncate of a table is a barrier
// for that table: it goes only once every earlier event of the table is
// resolved, and no later event of the table goes before it is resolved; a
// row with a parked event has every later event parked behind it until a
// replay delivers them, and a table with a parked truncate likewise;
// nothing is resolved before it is delivered, filtered, skipped as already
// delivered, or durably parked; a parked event leaves walcast.parked only
// once the sink wrote it (a replayed event it calls a duplicate stays).
// Replayed events travel in batches of their own, flagged as a replay.
package schedule

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/walcast/walcast/host/internal/ack"
	"github.com/walcast/walcast/host/internal/checkpoint"
	"github.com/walcast/walcast/host/internal/fanout"
	"github.com/walcast/walcast/pluginkit"
)

// Deliverer is the sink as the scheduler sees it (the plugin client). It
// must allow concurrent calls when MaxInFlight > 1.
type Deliverer interface {
	// Deliver hands over a batch; ctx ends at the delivery timeout.
	Deliver(ctx context.Context, events []pluginkit.Event) (pluginkit.DeliverResult, error)
}

// ParkStore persists parked events (walcast.parked).
type ParkStore interface {
	Park(ctx context.Context, ps []checkpoint.Parked) error
	Unpark(ctx context.Context, sink string, ids []pluginkit.EventID) error
	ParkedRows(ctx context.Context, sink string) ([]string, error)
	ListParked(ctx context.Context, sink, row string) ([]checkpoint.Parked, error)
	ParkedRowOf(ctx context.Context, sink string, id pluginkit.EventID) (string, error)
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
	// SkipThrough: events at or below it were delivered before (the sink's
	// checkpoint); they are resolved without being delivered again.
	SkipThrough pluginkit.EventID
	// Tables ("schema.table") and Ops, when non-empty, select the events
	// the sink receives; the others are resolved without delivery.
	Tables map[string]bool
	Ops    map[pluginkit.Op]bool
	// Parked persists parked events; nil disables parking (events are
	// retried forever), which library-style callers may want.
	Parked ParkStore
	Meter  *Meter
	Logger *slog.Logger
	// Observe, when set, is told how long each Deliver took and how it
	// ended: "ok" or a pluginkit.Kind's name (for metrics).
	Observe func(took time.Duration, outcome string)
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
	Stats   Stats

	// paused is set by an operator (walcast pause); wake tells Run.
	paused atomic.Bool
	wake   chan struct{}

	// Owned by the Run goroutine.
	pend       *pending
	parkedRows map[string]bool
	// parkedTables: tables whose truncate is parked; every later event of
	// the table is parked behind it (and its row then stays parked).
	parkedTables map[string]bool
	replaying    map[string]bool            // parked rows whose events are being replayed
	replayIDs    map[pluginkit.EventID]bool // replayed events pending or in flight
	waiters      []*replayWaiter
	window       int // events held: pending plus in flight
	bucket       *bucket
	pausedTill   time.Time
	gapCarry     bool // a gap flag whose event was filtered out: it goes to the next one
	inFlight     int  // batches
	flying       int  // events in those batches
	flyBytes     int  // payload bytes in those batches
	results      chan result
}

type result struct {
	batch []*entry
	bytes int // payload bytes of batch
	res   pluginkit.DeliverResult
	err   error
	took  time.Duration
}

// New returns a scheduler; call Run.
func New(cfg Config, queue *fanout.Queue, tracker *ack.Tracker, sink Deliverer) *Scheduler {
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
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Scheduler{
		cfg: cfg, queue: queue, tracker: tracker, sink: sink,
		log:          log.With("sink", cfg.SinkID),
		replays:      make(chan replayReq, 16),
		wake:         make(chan struct{}, 1),
		pend:         newPending(),
		parkedRows:   map[string]bool{},
		parkedTables: map[string]bool{},
		replaying:    map[string]bool{},
		replayIDs:    map[pluginkit.EventID]bool{},
		// Every lane full plus one batch ready for the first lane that
		// frees up. In-flight events count: they are held until they land,
		// and counting only the pending ones would double what a sink with
		// many lanes keeps in memory without making it any faster.
		window:  max((cfg.MaxInFlight+1)*cfg.BatchSize, 1024),
		results: make(chan result, cfg.MaxInFlight),
	}
	if cfg.RateLimit > 0 {
		s.bucket = newBucket(cfg.RateLimit)
	}
	return s
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
// unresolved and are replayed by PostgreSQL after a restart).
func (s *Scheduler) Run(ctx context.Context, stop <-chan struct{}) error {
	if s.cfg.Parked != nil {
		var rows []string
		err := retryStore(ctx, s.log, func(ctx context.Context) (err error) {
			rows, err = s.cfg.Parked.ParkedRows(ctx, s.cfg.SinkID)
			return err
		})
		if err != nil {
			return nil // ctx ended
		}
		for _, r := range rows {
			s.parkedRows[r] = true
			if t := tableOfRow(r); t != "" {
				s.parkedTables[t] = true
			}
		}
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	stopping := false
	paused := false
	if s.paused.Load() {
		paused = true
		s.log.Info("sink paused by an operator: no deliveries until walcast resume")
	}
	for {
		if ctx.Err() != nil {
			return nil
		}
		var wake time.Time
		if !stopping {
			var err error
			if wake, err = s.dispatch(ctx); err != nil {
				return err
			}
		}
		if stopping && s.inFlight == 0 {
			return nil
		}
		s.Stats.Held.Store(int64(s.held()))
		s.Stats.InFlight.Store(int64(s.inFlight))
		var queue <-chan fanout.Item
		if !stopping && s.room() {
			queue = s.queue.C
		}
		armTimer(timer, wake)
		select {
		case <-ctx.Done():
			return nil
		case <-stop:
			stopping = true
			stop = nil
		case it := <-queue:
			if err := s.accept(ctx, it); err != nil {
				return err
			}
			// Take whatever else is queued right away, so batches fill.
			for s.room() {
				select {
				case it := <-s.queue.C:
					if err := s.accept(ctx, it); err != nil {
						return err
					}
					continue
				default:
				}
				break
			}
		case r := <-s.results:
			s.inFlight--
			s.flying -= len(r.batch)
			s.flyBytes -= r.bytes
			if err := s.land(ctx, r); err != nil {
				return err
			}
		case req := <-s.replays:
			if err := s.startReplay(ctx, req); err != nil {
				s.log.Error("replay", "err", err)
				if req.done != nil {
					req.done <- err
				}
			}
		case <-s.wake:
			if p := s.paused.Load(); p != paused {
				paused = p
				if p {
					s.log.Info("sink paused by an operator: no new deliveries until walcast resume", "in_flight", s.inFlight)
				} else {
					s.log.Info("sink resumed")
				}
			}
		case <-timer.C:
		}
	}
}

// held is how many events the scheduler holds: pending and in flight.
func (s *Scheduler) held() int { return s.pend.len() + s.flying }

// room reports whether the scheduler may take more events from its queue:
// fewer than the window, and fewer payload bytes than maxHeldBytes, so
// that a table of large rows cannot multiply the window into gigabytes.
func (s *Scheduler) room() bool {
	return s.held() < s.window && s.pend.bytes+s.flyBytes < s.maxHeldBytes()
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
	gap := it.GapBefore || s.gapCarry
	s.gapCarry = false
	switch {
	case ev.ID.Compare(s.cfg.SkipThrough) <= 0:
		s.Stats.Skipped.Add(1)
		s.tracker.Resolve(s.cfg.Index, it.Seq)
		s.gapCarry = gap
		return nil
	case !s.wants(ev):
		s.Stats.Filtered.Add(1)
		s.tracker.Resolve(s.cfg.Index, it.Seq)
		s.gapCarry = gap
		return nil
	}
	e := newEntry(ev)
	e.seq, e.gapBefore = it.Seq, gap
	if s.parkedRows[e.row] || (e.oldRow != "" && s.parkedRows[e.oldRow]) {
		s.gapCarry = gap
		reason := "parked behind an earlier parked event of the same row"
		if !s.parkedRows[e.row] {
			reason = "parked behind an earlier parked event of the row whose key this update changed"
		}
		return s.park(ctx, []*entry{e}, reason, false)
	}
	if s.parkedTables[e.table] {
		s.gapCarry = gap
		return s.park(ctx, []*entry{e}, "parked behind a parked truncate of the same table", false)
	}
	s.pend.add(e)
	return nil
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

// dispatch starts as many batches as lanes, pause and rate limit allow,
// and returns when the next one could start (zero: on the next event or
// result).
func (s *Scheduler) dispatch(ctx context.Context) (time.Time, error) {
	var wake time.Time
	if s.paused.Load() {
		return wake, nil
	}
	for s.inFlight < s.cfg.MaxInFlight && s.pend.len() > 0 {
		now := time.Now()
		if now.Before(s.pausedTill) {
			return s.pausedTill, nil
		}
		lim := limits{events: s.cfg.BatchSize, bytes: s.cfg.MaxBatchBytes, strict: s.cfg.Strict}
		if s.bucket != nil {
			n, at := s.bucket.available(now)
			if n < 1 {
				return at, nil
			}
			lim.events = min(lim.events, n)
		}
		batch, w := s.pend.take(now, lim)
		if len(batch) == 0 {
			return w, nil
		}
		wake = w
		if s.bucket != nil {
			s.bucket.take(len(batch))
		}
		size := 0
		for _, e := range batch {
			size += e.bytes
		}
		s.inFlight++
		s.flying += len(batch)
		s.flyBytes += size
		go s.deliver(ctx, batch, size)
	}
	return wake, nil
}

// deliver runs one attempt in its own goroutine.
func (s *Scheduler) deliver(ctx context.Context, batch []*entry, size int) {
	events := make([]pluginkit.Event, len(batch))
	gap := false
	for i, e := range batch {
		events[i] = e.ev
		gap = gap || e.gapBefore
	}
	// A batch is all replayed events or none (pending.take).
	replay := batch[0].replay
	start := time.Now()
	dctx, cancel := context.WithTimeout(ctx, s.cfg.DeliverTimeout)
	if gap {
		dctx = pluginkit.WithGapBefore(dctx)
	}
	if replay {
		dctx = pluginkit.WithReplay(dctx)
	}
	res, err := s.sink.Deliver(dctx, events)
	cancel()
	if err == nil && dctx.Err() == context.DeadlineExceeded {
		// Answered too late: the host already treats it as failed.
		err = fmt.Errorf("deliver did not resolve within %s: %w", s.cfg.DeliverTimeout, context.DeadlineExceeded)
	}
	if err == nil && replay && res.Duplicates > 0 {
		// A parked event lies below the sink's checkpoint by definition,
		// so a sink that calls it a duplicate most likely skipped it
		// without writing it. Unparking it would lose it without a word:
		// it fails instead (alone, it is parked again, saying why). The
		// host cannot tell that from a sink that really holds it; an
		// operator can, and removes it from walcast.parked.
		err = pluginkit.Permanent(fmt.Errorf("the sink reported %d of %d replayed events as already delivered; a sink that skips events "+
			"at or below its checkpoint has not written them (it must write replay batches, see pluginkit.IsReplay), so they stay parked: "+
			"if the destination does hold them, delete them from walcast.parked", res.Duplicates, len(batch)))
	}
	if err == nil && replay && s.cfg.Parked != nil {
		// Replayed events leave walcast.parked before they count as
		// delivered; if that fails they are delivered again later.
		ids := make([]pluginkit.EventID, len(batch))
		for i, e := range batch {
			ids[i] = e.ev.ID
		}
		err = retryStore(ctx, s.log, func(ctx context.Context) error { return s.cfg.Parked.Unpark(ctx, s.cfg.SinkID, ids) })
	}
	s.results <- result{batch: batch, bytes: size, res: res, err: err, took: time.Since(start)}
}

// land handles a finished attempt.
func (s *Scheduler) land(ctx context.Context, r result) error {
	s.pend.landed(r.batch)
	bytes := r.bytes
	if s.cfg.Observe != nil && ctx.Err() == nil {
		outcome := "ok"
		if r.err != nil {
			k, _ := pluginkit.KindOf(r.err)
			outcome = k.String()
		}
		s.cfg.Observe(r.took, outcome)
	}
	if r.err == nil {
		s.Stats.Attempts.Add(1)
		s.Stats.Delivered.Add(int64(len(r.batch) - r.res.Duplicates))
		s.Stats.Bytes.Add(int64(bytes))
		s.Stats.LastSuccess.Store(time.Now().UnixNano())
		s.Stats.Duplicates.Add(int64(r.res.Duplicates))
		s.cfg.Meter.attempt(len(r.batch), bytes, true)
		seqs := make([]ack.Seq, 0, len(r.batch))
		replayed := map[string]bool{}
		for _, e := range r.batch {
			if e.replay {
				s.Stats.Replayed.Add(1)
				delete(s.replayIDs, e.ev.ID)
				replayed[e.row] = true
				if e.oldRow != "" {
					replayed[e.oldRow] = true
				}
				continue
			}
			seqs = append(seqs, e.seq)
		}
		s.tracker.Resolve(s.cfg.Index, seqs...)
		for row := range replayed {
			if err := s.continueReplay(ctx, row); err != nil {
				return err
			}
		}
		return nil
	}
	if ctx.Err() != nil {
		return nil // shutting down: the events stay unresolved
	}
	kind, pause := pluginkit.KindOf(r.err)
	if kind == pluginkit.KindFatal {
		// The sink cannot deliver anything any more: parking would park
		// the whole stream. Stop; the batch stays unresolved and comes
		// again after a restart, to a fresh plugin process.
		s.Stats.Attempts.Add(1)
		s.Stats.Failures.Add(1)
		s.cfg.Meter.attempt(len(r.batch), bytes, false)
		return fmt.Errorf("sink cannot go on (%s); stopping so that a restart starts it afresh: %w", r.batch[0].ev.ID, r.err)
	}
	if kind == pluginkit.KindThrottled {
		// Not an attempt: not counted, not metered. Attempts are counted
		// here, once the outcome is known, so the counter never goes down.
		s.Stats.Throttles.Add(1)
		until := time.Now().Add(pause)
		if until.After(s.pausedTill) {
			s.pausedTill = until
		}
		s.log.Info("sink throttled; pausing", "pause", pause, "err", r.err)
		s.pend.putBack(r.batch)
		return nil
	}
	s.Stats.Attempts.Add(1)
	s.Stats.Failures.Add(1)
	s.cfg.Meter.attempt(len(r.batch), bytes, false)
	now := time.Now()
	multiRow, multi := false, len(r.batch) > 1
	for _, e := range r.batch[1:] {
		if e.row != r.batch[0].row {
			multiRow = true
			break
		}
	}
	// One delay for the whole batch: with a jitter drawn per event the
	// events would come due at different moments and the batch would
	// re-form in pieces, which is what the first retry must not do.
	attempts := 0
	for _, e := range r.batch {
		attempts = max(attempts, e.attempts+1)
	}
	delay := s.backoff(attempts)
	if multi && kind == pluginkit.KindPermanent {
		delay = min(delay, time.Second) // isolate quickly
	}
	var park []*entry
	retry := r.batch[:0:0]
	for _, e := range r.batch {
		e.attempts++
		e.lastErr = r.err.Error()
		if e.firstFail.IsZero() {
			e.firstFail = now
		}
		// The first failure retries the batch as it was: most failures
		// are transient (a plugin restarting, a network blip) and
		// splitting would turn one batch into many. From the second on,
		// the batch is split to find the row that really fails.
		switch {
		case e.attempts < 2:
		case multiRow:
			e.iso = max(e.iso, batchRow)
		case multi:
			e.iso = batchOne
		}
		// Only an event that failed on its own is parked: in a batch the
		// culprit is not known, so the batch is split first. A permanent
		// failure is not retried once the event is alone.
		alone := !multi
		if alone && s.cfg.Parked != nil && (e.attempts >= s.cfg.MaxAttempts || kind == pluginkit.KindPermanent) {
			park = append(park, e)
			continue
		}
		e.notBefore = now.Add(delay)
		retry = append(retry, e)
	}
	first, last := r.batch[0].ev.ID, r.batch[len(r.batch)-1].ev.ID
	s.log.Warn("delivery failed", "kind", kind.String(), "events", len(r.batch), "first", first.String(), "last", last.String(),
		"attempt", attempts, "retry_in", delay, "err", r.err)
	s.pend.putBack(retry)
	if len(park) > 0 {
		return s.park(ctx, park, "", true)
	}
	return nil
}

// park writes events to walcast.parked and resolves them. An event is
// parked under its row and, for an update that changed the key, under the
// old row too; every later event of those rows is parked behind it until a
// replay clears them. A truncate is parked under its table's row, and every
// later event of the table is parked behind it. failed says es just failed:
// the pending events of their rows (and of the rows a key change among
// those brings in) and, for a truncate, of its table are then parked behind
// them, and the replay of those rows stops. An event parked on arrival has
// nothing pending behind it.
func (s *Scheduler) park(ctx context.Context, es []*entry, reason string, failed bool) error {
	rows := map[string]bool{}
	tables := map[string]bool{}
	for _, e := range es {
		rows[e.row] = true
		if e.oldRow != "" {
			rows[e.oldRow] = true
		}
		if e.barrier {
			tables[e.table] = true
		}
	}
	all := slices.Clone(es)
	behind := func(removed []*entry) {
		for _, e := range removed {
			rows[e.row] = true
			if e.oldRow != "" {
				rows[e.oldRow] = true
			}
			if e.replay {
				// Still in walcast.parked: the next replay loads it again.
				delete(s.replayIDs, e.ev.ID)
				continue
			}
			all = append(all, e)
		}
	}
	if failed {
		behind(s.pend.removeRows(rows))
		for t := range tables {
			behind(s.pend.removeTable(t))
		}
		for _, e := range es {
			delete(s.replayIDs, e.ev.ID)
		}
	}
	for t := range tables {
		s.parkedTables[t] = true
	}
	for r := range rows {
		s.parkedRows[r] = true
		if failed && s.replaying[r] {
			s.endReplay(r)
		}
	}
	now := time.Now()
	recs := make([]checkpoint.Parked, 0, len(all))
	for _, e := range all {
		p := checkpoint.Parked{Sink: s.cfg.SinkID, Event: e.ev, Row: e.row, OldRow: e.oldRow, Attempts: e.attempts,
			LastError: e.lastErr, FirstFailure: e.firstFail, LastFailure: now}
		if p.LastError == "" {
			p.LastError = reason
			if p.LastError == "" {
				p.LastError = "parked behind an earlier parked event of the same row"
			}
		}
		if p.FirstFailure.IsZero() {
			p.FirstFailure = now
		}
		recs = append(recs, p)
	}
	if err := retryStore(ctx, s.log, func(ctx context.Context) error { return s.cfg.Parked.Park(ctx, recs) }); err != nil {
		return err
	}
	seqs := make([]ack.Seq, 0, len(all))
	for _, e := range all {
		if !e.replay {
			seqs = append(seqs, e.seq)
		}
	}
	s.tracker.Resolve(s.cfg.Index, seqs...)
	s.Stats.Parked.Add(int64(len(all)))
	if es[0].attempts > 0 {
		s.log.Error("event parked after failed attempts", "event", es[0].ev.ID.String(), "table", es[0].ev.Schema+"."+es[0].ev.Table,
			"attempts", es[0].attempts, "parked_behind", len(all)-len(es), "err", es[0].lastErr)
	}
	return nil
}

func (s *Scheduler) backoff(attempts int) time.Duration {
	d := s.cfg.RetryBase
	for i := 1; i < attempts && d < s.cfg.MaxRetryDelay; i++ {
		d *= 2
	}
	d = min(d, s.cfg.MaxRetryDelay)
	jitter := time.Duration(rand.Int64N(int64(d)/5+1)) - d/10
	return d + jitter
}

// retryStore retries a control-plane write (the database may be
// restarting) until it succeeds or ctx ends: an event is only resolved once
// its park record is durable.
func retryStore(ctx context.Context, log *slog.Logger, f func(context.Context) error) error {
	delay := 100 * time.Millisecond
	for {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := f(wctx)
		cancel()
		if err == nil || ctx.Err() != nil {
			return err
		}
		log.Warn("control-plane write failed; retrying", "retry_in", delay, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}
