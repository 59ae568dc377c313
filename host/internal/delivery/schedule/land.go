package schedule

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/host/internal/pg"
	"github.com/walcast/walcast/pluginkit"
)

// A finished attempt is landed in two steps: decide, a pure function of
// the batch, its error and the policy, says what becomes of every event;
// land applies that to the scheduler (tracker, pending, parking, stats).

// verdict is what happens after an attempt.
type verdict int

const (
	delivered verdict = iota // resolve the batch
	throttled                // pause the sink; the batch goes back, not counted
	failed                   // a counted failure: retry some events, park others
	fatal                    // the sink cannot go on: stop the scheduler
)

// decision is decide's answer.
type decision struct {
	verdict verdict
	kind    pluginkit.Kind
	pause   time.Duration // throttled: how long the sink pauses
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
	kind, pause := pluginkit.KindOf(err)
	switch kind {
	case pluginkit.KindFatal:
		return decision{verdict: fatal, kind: kind}
	case pluginkit.KindThrottled:
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
	if multi && kind == pluginkit.KindPermanent {
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
			e.iso = max(e.iso, batchRow)
		case multi:
			e.iso = batchOne
		}
		if !multi && pol.canPark && (e.attempts >= pol.maxAttempts || kind == pluginkit.KindPermanent) {
			d.park = append(d.park, e)
			continue
		}
		e.notBefore = now.Add(d.delay)
		d.retry = append(d.retry, e)
	}
	return d
}

// land applies a finished attempt to the scheduler.
func (s *Scheduler) land(ctx context.Context, r result) error {
	s.pend.landed(r.batch)
	if s.cfg.Observe != nil && ctx.Err() == nil {
		outcome := "ok"
		if r.err != nil {
			k, _ := pluginkit.KindOf(r.err)
			outcome = k.String()
		}
		s.cfg.Observe(r.took, outcome)
	}
	if r.err != nil && ctx.Err() != nil {
		return nil // shutting down: the events stay unresolved
	}
	pol := policy{maxAttempts: s.cfg.MaxAttempts, canPark: s.cfg.Parked != nil, backoff: s.backoff}
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
	s.cfg.Meter.attempt(len(r.batch), r.bytes, false)
	if d.verdict == fatal {
		return fmt.Errorf("sink cannot go on (%s); stopping so that a restart starts it afresh: %w", r.batch[0].ev.ID, r.err)
	}
	first, last := r.batch[0].ev.ID, r.batch[len(r.batch)-1].ev.ID
	s.log.Warn("delivery failed", "kind", d.kind.String(), "events", len(r.batch), "first", first.String(), "last", last.String(),
		"attempt", d.attempts, "retry_in", d.delay, "err", r.err)
	s.pend.putBack(d.retry)
	if len(d.park) > 0 {
		return s.park(ctx, d.park, "", true)
	}
	return nil
}

// delivered resolves a delivered batch; replayed events instead let their
// rows' replay go on.
func (s *Scheduler) delivered(ctx context.Context, r result) error {
	s.Stats.Attempts.Add(1)
	s.Stats.Delivered.Add(int64(len(r.batch) - r.res.Duplicates))
	s.Stats.Bytes.Add(int64(r.bytes))
	s.Stats.LastSuccess.Store(time.Now().UnixNano())
	s.Stats.Duplicates.Add(int64(r.res.Duplicates))
	s.cfg.Meter.attempt(len(r.batch), r.bytes, true)
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
