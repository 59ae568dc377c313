package host

import (
	"context"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/host/internal/delivery/rules"
	"github.com/walcast/walcast/host/internal/source/capture"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// consumer is the stream's capture.Consumer: it hands events to Next
// through a bounded handoff and reports the position acks have released. All its
// methods run on the capture goroutine.
type consumer struct {
	events *handoff
	acks   *acks
	// drain ends when Close begins: from then on events are no longer
	// handed over (Next would refuse them) but capture keeps reading, so
	// that the commit record of an acknowledged transaction still arrives.
	drain context.Context
	// last is the last event handed over: the idle advance needs it
	// acknowledged.
	last cdc.EventID
	// rules are StreamConfig's filter and transform, nil without them.
	rules *rules.Rules
}

var _ capture.Consumer = (*consumer)(nil)

// Event blocks while the handoff is full — the consumer is behind, and
// the changes wait in the slot instead of in memory. One consumer reads
// the stream, so the host-only routing facts (sinks, old key) are dropped.
func (c *consumer) Event(ctx context.Context, ev change.Event, idle func()) error {
	if c.rules != nil {
		res, err := c.rules.Apply(ev.Event, ev.OldKey)
		switch {
		case err != nil:
			ev.Err = err // handed over as captured
		case !res.Keep:
			// Never handed over: like a change outside the publication,
			// it is released with the events before it.
			return nil
		default:
			// The decoder's layout is the captured envelope's: the
			// transformed one is read by scanning it (newEvent).
			ev.Event, ev.OldKey, ev.Layout = res.Event, res.OldKey, change.Layout{}
		}
	}
	if c.drain.Err() == nil {
		if err := c.events.put(c.drain, ev, idle); err != nil && (ctx.Err() != nil || c.drain.Err() == nil) {
			return err
		}
	}
	// Handed over, or dropped while draining: either way later commits
	// and idle advances must count it as not yet acknowledged.
	c.last = ev.ID
	return nil
}

// Commit implements capture.Consumer.
// A waiting Next gets the transaction's events now.
func (c *consumer) Commit(commitLSN, endLSN uint64) {
	c.acks.commit(c.last, endLSN)
	c.events.flush()
}

// Flush implements capture.Consumer.
func (c *consumer) Flush() uint64 { return c.acks.position() }

// AdvanceIdle implements capture.Consumer.
func (c *consumer) AdvanceIdle(walEnd uint64) bool { return c.acks.advanceIdle(walEnd, c.last) }
