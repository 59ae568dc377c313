package schedule

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/host/internal/pg"
)

// A finished attempt is landed in two steps: decide (or, for an answer
// that named failed events, decideEach), a pure function of the batch,
// the answer and the policy, says what becomes of every event; land
// applies that to the scheduler (tracker, pending, parking, stats).

// verdict is what happens after an attempt.
type verdict int

const (
	delivered verdict = iota // resolve the batch
	throttled                // pause the sink; the batch goes back, not counted
	failed                   // a counted failure: retry some events, park others
	fatal                    // the sink cannot go on: stop the scheduler
	partial                  // some events failed, the others are delivered
)

// decision is decide's answer.
type decision struct {
	verdict verdict
	kind    attempt.Kind
	pause   time.Duration // throttled: how long the sink pauses
	// partial: an event asked the sink to pause for pause, saying
	// throttleErr.
	throttleErr error
	// failed: the events to retry (notBefore set) and to park, and the
	// delay before the retry.
	retry, park []*entry
	delay       time.Duration
	attempts    int // the highest attempt number in the batch
}

// policy is the part of Config decide needs, and the backoff for a given
// attempt number (random jitter included, so it is passed in).
type policy struct {
	maxAttempts int
	canPark     bool
	backoff     func(attempts int) time.Duration
}

// decide applies the delivery policy to one finished attempt. It updates
// the entries' failure bookkeeping (attempts, last error, isolation, next
// attempt time) and touches nothing else, so tests can drive it with a
// table of cases.
//
//   - success: delivered.
//   - fatal: the sink cannot deliver anything any more; parking would park
//     the whole stream, so the scheduler stops and the batch stays
//     unresolved for a restart with a fresh plugin process.
//   - throttled: not an attempt; the sink pauses and the batch goes back.
//   - otherwise a failed attempt. The first failure retries the batch as it
//     was (most failures are transient); from the second on it is split,
//     first by row, then into single events, to find the event that really
//     fails. Only an event that failed on its own is parked: after
//     maxAttempts, or at once on a permanent error. One delay serves the
//     whole batch, so that a retried batch re-forms whole.
func decide(batch []*entry, err error, pol policy, now time.Time) decision {
	if err == nil {
		return decision{verdict: delivered}
	}
	kind, pause := attempt.KindOf(err)
	switch kind {
	case attempt.KindFatal:
		return decision{verdict: fatal, kind: kind}
	case attempt.KindThrottle:
		return decision{verdict: throttled, kind: kind, pause: pause}
	}
	d := decision{verdict: failed, kind: kind}
	multiRow, multi := false, len(batch) > 1
	for _, e := range batch[1:] {
		if e.row != batch[0].row {
			multiRow = true
			break
		}
	}
	for _, e := range batch {
		d.attempts = max(d.attempts, e.attempts+1)
	}
	d.delay = pol.backoff(d.attempts)
	if multi && kind == attempt.KindPermanent {
		d.delay = min(d.delay, time.Second) // isolate quickly
	}
	d.retry = batch[:0:0]
	for _, e := range batch {
		e.attempts++
		e.lastErr = err.Error()
		if e.firstFail.IsZero() {
			e.firstFail = now
		}
		switch {
		case e.attempts < 2:
		case multiRow:
			e.isolation = max(e.isolation, batchRow)
		case multi:
			e.isolation = batchOne
		}
		if !multi && pol.canPark && (e.attempts >= pol.maxAttempts || kind == attempt.KindPermanent) {
			d.park = append(d.park, e)
			continue
		}
		e.notBefore = now.Add(d.delay)
		d.retry = append(d.retry, e)
	}
	return d
}

// answer sorts a batch by an answer that named failed events.
type answer struct {
	delivered []*entry
	failed    []failedEntry
	// held must go after a failed event (see sortAnswer): they go back
	// pending as they were, delivered again after it.
	held []*entry
}

// failedEntry is an event the sink named, and why it failed.
type failedEntry struct {
	e   *entry
	err error
}

// sortAnswer sorts batch by the events the sink named as failed. An event
// that must go after a failed one is held back, whatever the sink said of
// it, so that no event overtakes one it must follow: in strict order every
// later event of the batch, otherwise a later event of a failed or held
// event's row, every later event of a table whose truncate failed or was
// held, and a later truncate of a table with a failed or held event (the
// order relation of the package doc). It reads only what an entry's
// identity says, which does not change while the batch is in flight, so
// the delivery goroutine may call it.
func sortAnswer(batch []*entry, failed []attempt.Failure, strict bool) *answer {
	errs := make(map[int]error, len(failed))
	for _, f := range failed {
		errs[f.Index] = f.Err
	}
	a := &answer{}
	rows, tables, truncated := map[string]bool{}, map[string]bool{}, map[string]bool{}
	behind := func(e *entry) {
		rows[e.row] = true
		if e.oldRow != "" {
			rows[e.oldRow] = true
		}
		tables[e.table] = true
		truncated[e.table] = truncated[e.table] || e.barrier
	}
	for i, e := range batch {
		if err, ok := errs[i]; ok {
			a.failed = append(a.failed, failedEntry{e: e, err: err})
			behind(e)
			continue
		}
		if (strict && len(a.failed) > 0) || e.touches(rows) || truncated[e.table] || (e.barrier && tables[e.table]) {
			a.held = append(a.held, e)
			behind(e)
			continue
		}
		a.delivered = append(a.delivered, e)
	}
	return a
}

// decideEach applies the delivery policy to an answer that named failed
// events, like decide for a failed batch but event by event: a failed
// event failed on its own, so it needs no isolating. A retryable one backs
// off by its own attempts and parks after maxAttempts, a permanent one
// parks at once, a throttled one goes back without counting an attempt and
// pauses the sink (for the longest pause asked), and a fatal one stops the
// sink. Held events go back as they were.
func decideEach(a *answer, pol policy, now time.Time) decision {
	d := decision{verdict: partial}
	for i, f := range a.failed {
		e := f.e
		kind, pause := attempt.KindOf(f.err)
		if i == 0 {
			d.kind = kind
		}
		switch kind {
		case attempt.KindFatal:
			return decision{verdict: fatal, kind: kind}
		case attempt.KindThrottle:
			d.pause = max(d.pause, pause)
			if d.throttleErr == nil {
				d.throttleErr = f.err
			}
			d.retry = append(d.retry, e)
			continue
		}
		e.attempts++
		e.lastErr = f.err.Error()
		if e.firstFail.IsZero() {
			e.firstFail = now
		}
		d.attempts = max(d.attempts, e.attempts)
		if pol.canPark && (e.attempts >= pol.maxAttempts || kind == attempt.KindPermanent) {
			d.park = append(d.park, e)
			continue
		}
		e.notBefore = now.Add(pol.backoff(e.attempts))
		d.retry = append(d.retry, e)
	}
	d.retry = append(d.retry, a.held...)
	return d
}

// land applies a finished attempt to the scheduler.
func (s *Scheduler) land(ctx context.Context, r result) error {
	s.pending.landed(r.batch)
	if s.cfg.Observe != nil && ctx.Err() == nil {
		s.cfg.Observe(r.elapsed, outcome(r))
	}
	if r.err != nil && ctx.Err() != nil {
		return nil // shutting down: the events stay unresolved
	}
	pol := policy{maxAttempts: s.cfg.MaxAttempts, canPark: s.cfg.Parked != nil, backoff: s.backoff}
	if r.answer != nil {
		return s.landAnswer(ctx, r, decideEach(r.answer, pol, time.Now()))
	}
	d := decide(r.batch, r.err, pol, time.Now())
	// Attempts are counted here, once the outcome is known, so the
	// counter never goes down; a throttle is not an attempt.
	switch d.verdict {
	case delivered:
		s.throttle.answered(r.gen)
		return s.delivered(ctx, r)
	case throttled:
		s.throttled(r, d.pause)
		return nil
	}
	s.throttle.answered(r.gen)
	s.Stats.Attempts.Add(1)
	s.Stats.Failures.Add(1)
	s.cfg.Meter.attempt(0, r.bytes, true)
	if d.verdict == fatal {
		return s.fatal(r, r.err)
	}
	first, last := r.batch[0].ev.ID, r.batch[len(r.batch)-1].ev.ID
	s.log.Warn("delivery failed", "kind", d.kind.String(), "events", len(r.batch), "first", first.String(), "last", last.String(),
		"attempt", d.attempts, "retry_in", d.delay, "err", r.err)
	s.pending.putBack(d.retry)
	if len(d.park) > 0 {
		return s.park(ctx, d.park, "", true)
	}
	return nil
}

// outcome names how an attempt ended, for Config.Observe.
func outcome(r result) string {
	switch {
	case r.err != nil:
		k, _ := attempt.KindOf(r.err)
		return k.String()
	case r.answer != nil:
		k, _ := attempt.KindOf(r.answer.failed[0].err)
		return k.String()
	}
	return "ok"
}

// fatal is the error that stops the scheduler when the sink cannot go on.
func (s *Scheduler) fatal(r result, err error) error {
	return fmt.Errorf("sink cannot go on (%s); stopping so that a restart starts it afresh: %w", r.batch[0].ev.ID, err)
}

// landAnswer applies an answer that named failed events: the named ones
// retry, pause the sink or park (decideEach), the held ones go back, and
// the rest are delivered. The events go back pending before the failed
// ones park, so that parking takes what must follow them along.
func (s *Scheduler) landAnswer(ctx context.Context, r result, d decision) error {
	a := r.answer
	s.Stats.Attempts.Add(1)
	if d.verdict == fatal {
		s.throttle.answered(r.gen)
		s.Stats.Failures.Add(1)
		s.cfg.Meter.attempt(0, r.bytes, true)
		return s.fatal(r, a.failed[0].err)
	}
	bytes := 0
	for _, e := range a.delivered {
		bytes += e.bytes
	}
	// A failed attempt for the events that failed (a throttle is none),
	// a successful one for the others.
	failedAttempt := d.attempts > 0
	if failedAttempt {
		s.Stats.Failures.Add(1)
	}
	s.cfg.Meter.attempt(len(a.delivered), bytes, failedAttempt)
	if d.throttleErr != nil {
		s.Stats.Throttles.Add(1)
		s.pause(r.gen, d.pause, d.throttleErr)
	} else {
		s.throttle.answered(r.gen)
	}
	s.log.Warn("delivery failed for some events of the batch", "kind", d.kind.String(), "failed", len(a.failed), "delivered", len(a.delivered),
		"held_back", len(a.held), "first_failed", a.failed[0].e.ev.ID.String(), "attempt", d.attempts, "err", a.failed[0].err)
	s.pending.putBack(d.retry)
	if len(d.park) > 0 {
		if err := s.park(ctx, d.park, "", true); err != nil {
			return err
		}
	}
	return s.resolve(ctx, a.delivered, bytes, min(r.res.Duplicates, len(a.delivered)))
}

// delivered resolves a delivered batch.
func (s *Scheduler) delivered(ctx context.Context, r result) error {
	s.Stats.Attempts.Add(1)
	s.cfg.Meter.attempt(len(r.batch), r.bytes, false)
	return s.resolve(ctx, r.batch, r.bytes, r.res.Duplicates)
}

// resolve resolves delivered events (bytes of payload, duplicates of them
// the sink already had); replayed events instead let their rows' replay
// go on.
func (s *Scheduler) resolve(ctx context.Context, es []*entry, bytes, duplicates int) error {
	if len(es) == 0 {
		return nil
	}
	s.Stats.Delivered.Add(int64(len(es) - duplicates))
	s.Stats.Bytes.Add(int64(bytes))
	s.Stats.LastSuccess.Store(time.Now().UnixNano())
	s.Stats.Duplicates.Add(int64(duplicates))
	seqs := make([]ack.Seq, 0, len(es))
	replayed := map[string]bool{}
	for _, e := range es {
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
// its park record is durable. An error retrying cannot fix (a privilege
// revoked, a table dropped: pg.Permanent) is returned at once, and
// stops the sink.
func retryStore(ctx context.Context, log *slog.Logger, f func(context.Context) error) error {
	delay := 100 * time.Millisecond
	for {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := f(wctx)
		cancel()
		if err == nil || ctx.Err() != nil || pg.Permanent(err) {
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
