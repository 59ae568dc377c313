package schedule

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// One delivery attempt runs in a goroutine of its own and reports back to
// the Run loop through Scheduler.results; Run joins them before it returns.

type result struct {
	batch []*entry
	bytes int // payload bytes of batch
	res   attempt.Result
	err   error
	// answer sorts the batch by what res says of each event, when err is
	// nil and res names failed events.
	answer *answer
	// elapsed is how long the Deliver call took.
	elapsed time.Duration
	// gen is the throttle generation the batch was sent in (throttleState).
	gen uint64
}

// deliver runs one attempt in its own goroutine.
func (s *Scheduler) deliver(ctx context.Context, batch []*entry, size int, gen uint64) {
	buf := s.eventsBuf(len(batch))
	defer s.putEventsBuf(buf)
	b := attempt.Batch{Events: *buf, Replay: batch[0].replay, Epoch: s.cfg.Epoch}
	// sent[i] is the batch index of b.Events[i]: a replayed event the
	// sink's rules now filter out or fail on is not sent (replayRules).
	// nil when every event is sent, as every live batch is.
	var sent []int
	for i, e := range batch {
		b.GapBefore = b.GapBefore || e.gapBefore
		if e.filtered || e.ruleErr != nil {
			if sent == nil {
				sent = make([]int, i, len(batch))
				for j := range sent {
					sent[j] = j
				}
			}
			continue
		}
		b.Events = append(b.Events, *e.sent())
		if sent != nil {
			sent = append(sent, i)
		}
	}
	*buf = b.Events
	// A batch is all replayed events or none (pending.take).
	start := time.Now()
	callCtx, cancel := context.WithTimeout(ctx, s.cfg.DeliverTimeout)
	var res attempt.Result
	var err error
	if len(b.Events) > 0 {
		res, err = s.sink.Deliver(callCtx, b)
	}
	cancel()
	r := result{batch: batch, bytes: size, gen: gen}
	r.err = s.checkAnswer(callCtx, b, res, err)
	if r.err == nil {
		res.Failed = withRuleFailures(batch, sent, res.Failed)
	}
	r.res = res
	if r.err == nil && len(res.Failed) > 0 {
		r.answer = sortAnswer(batch, res.Failed, s.cfg.Strict)
	}
	if r.err == nil && b.Replay && s.cfg.Parked != nil {
		// Replayed events leave walcast.parked before they count as
		// delivered; if that fails they are delivered again later.
		delivered := batch
		if r.answer != nil {
			delivered = r.answer.delivered
		}
		ids := make([]cdc.EventID, len(delivered))
		for i, e := range delivered {
			ids[i] = e.ev.ID
		}
		if len(ids) > 0 {
			r.err = retryStore(ctx, s.log, func(ctx context.Context) error { return s.cfg.Parked.Unpark(ctx, s.cfg.SinkID, ids) })
		}
	}
	r.elapsed = time.Since(start)
	s.results <- r
}

// checkAnswer returns the error the scheduler acts on for an answer: err
// itself, or one for an answer it cannot take as it is.
func (s *Scheduler) checkAnswer(callCtx context.Context, b attempt.Batch, res attempt.Result, err error) error {
	switch {
	case err != nil:
		return err
	case callCtx.Err() == context.DeadlineExceeded:
		// Answered too late: the host already treats it as failed.
		return fmt.Errorf("deliver did not resolve within %s: %w", s.cfg.DeliverTimeout, context.DeadlineExceeded)
	case b.Replay && res.Duplicates > 0:
		// A parked event lies below the sink's checkpoint by definition,
		// so a sink that calls it a duplicate most likely skipped it
		// without writing it. Unparking it would lose it without a word:
		// it fails instead (alone, it is parked again, saying why). The
		// host cannot tell that from a sink that really holds it; an
		// operator can, and removes it from walcast.parked.
		return attempt.Permanent(fmt.Errorf("the sink reported %d of %d replayed events as already delivered; a sink that skips events "+
			"at or below its checkpoint has not written them (it must write replay batches: pluginkit.Batch.Replay, or IsReplay for a Sink), so they stay parked: "+
			"if the destination does hold them, delete them from walcast.parked", res.Duplicates, len(b.Events)))
	}
	if cerr := res.Check(len(b.Events)); cerr != nil {
		return attempt.Retryable(fmt.Errorf("deliver: %w; retrying the whole batch", cerr))
	}
	return nil
}

// withRuleFailures turns the failures the sink named (indexes into what
// was sent; sent nil: the whole batch was) into indexes into batch, and adds the replayed events whose
// rules failed as permanent failures: they are parked again with the
// expression's error and their row's replay stops.
func withRuleFailures(batch []*entry, sent []int, failed []attempt.Failure) []attempt.Failure {
	if sent == nil {
		return failed
	}
	out := make([]attempt.Failure, 0, len(failed)+1)
	for _, f := range failed {
		out = append(out, attempt.Failure{Index: sent[f.Index], Err: f.Err})
	}
	for i, e := range batch {
		if e.ruleErr != nil {
			out = append(out, attempt.Failure{Index: i, Err: attempt.Permanent(e.ruleErr)})
		}
	}
	slices.SortFunc(out, func(a, b attempt.Failure) int { return a.Index - b.Index })
	return out
}

// eventsBuf returns an empty slice for a batch of n events. The slices
// are reused from batch to batch: a new one per batch was a sixth of the
// bytes the host allocated per event on the daemon → stdout benchmark
// (docs/benchmarks.md, "Where the daemon spends its time"). A Deliverer
// must not keep Batch.Events once Deliver returns (attempt.Batch).
func (s *Scheduler) eventsBuf(n int) *[]cdc.Event {
	if buf, ok := s.eventBufs.Get().(*[]cdc.Event); ok && cap(*buf) >= n {
		return buf
	}
	buf := make([]cdc.Event, 0, n)
	return &buf
}

// putEventsBuf clears buf, so that it holds no payload alive, and keeps it
// for the next batch.
func (s *Scheduler) putEventsBuf(buf *[]cdc.Event) {
	clear(*buf)
	*buf = (*buf)[:0]
	s.eventBufs.Put(buf)
}
