package schedule

import (
	"context"
	"fmt"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

// One delivery attempt runs in a goroutine of its own and reports back to
// the Run loop through Scheduler.results; Run joins them before it returns.

type result struct {
	batch []*entry
	bytes int // payload bytes of batch
	res   pluginkit.DeliverResult
	err   error
	took  time.Duration
	// gen is the throttle generation the batch was sent in (throttleState).
	gen uint64
}

// deliver runs one attempt in its own goroutine.
func (s *Scheduler) deliver(ctx context.Context, batch []*entry, size int, gen uint64) {
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
	s.results <- result{batch: batch, bytes: size, res: res, err: err, took: time.Since(start), gen: gen}
}
