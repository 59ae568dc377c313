package isolate

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/host/internal/delivery/fanout"
	"github.com/walcast/walcast/host/internal/delivery/schedule"
	"github.com/walcast/walcast/host/internal/source/capture"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// catchupStream is one sink's own stream: a capture of its catch-up slot feeding
// a fan-out with one queue, a tracker with one sink, and a scheduler. Its
// capture confirms to the catch-up slot what that tracker releases.
type catchupStream struct {
	slot    string
	tracker *ack.Tracker
	queue   *fanout.Queue
	sched   *schedule.Scheduler
	capt    *capture.Capture

	// boundary, when set, is the last event the pipeline's stream handed
	// over before the sink rejoined it: events past it are not this
	// stream's to deliver. reached: everything up to it has been handed
	// over.
	boundary atomic.Pointer[cdc.EventID]
	reached  atomic.Bool
	// done: every transaction committed at or below it has been handed
	// over (the last commit seen, or just below the slot's confirmed
	// position at the start), so a boundary at or below it is reached at
	// once: a stream with nothing new would otherwise wait for a keepalive.
	done atomic.Uint64

	// The scheduler's and the capture's goroutines close their done
	// channel after setting their error.
	stopSched  chan struct{}
	schedDone  chan struct{}
	schedErr   error
	stopCapt   context.CancelFunc
	captDone   chan struct{}
	captErr    error
	stopCalled bool
}

// catchupConsumer is the catch-up capture's consumer: the catch-up
// fan-out, held at the rejoin boundary.
type catchupConsumer struct {
	*fanout.Fanout
	stream *catchupStream
}

var _ capture.Consumer = catchupConsumer{}

// Event hands ev on unless it lies past the boundary; then it waits until
// the rejoin completes (ctx ends) or is called off (the boundary cleared).
func (b catchupConsumer) Event(ctx context.Context, ev change.Event, idle func()) error {
	var t *time.Ticker
	for {
		boundary := b.stream.boundary.Load()
		if boundary == nil || ev.ID.Compare(*boundary) <= 0 {
			break
		}
		b.stream.reached.Store(true)
		if t == nil {
			t = time.NewTicker(change.IdleEvery)
			defer t.Stop()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			idle()
		}
	}
	return b.Fanout.Event(ctx, ev, idle)
}

// Commit: once the transaction holding the boundary (or a later one) has
// ended, everything up to the boundary has been handed over.
func (b catchupConsumer) Commit(commitLSN, endLSN uint64) {
	b.Fanout.Commit(commitLSN, endLSN)
	b.stream.done.Store(commitLSN)
	if boundary := b.stream.boundary.Load(); boundary != nil && commitLSN >= boundary.CommitLSN {
		b.stream.reached.Store(true)
	}
}

// AdvanceIdle: the server has sent every transaction that committed
// before walEnd, and none is open.
func (b catchupConsumer) AdvanceIdle(walEnd uint64) bool {
	moved := b.Fanout.AdvanceIdle(walEnd)
	if boundary := b.stream.boundary.Load(); boundary != nil && walEnd > boundary.CommitLSN {
		b.stream.reached.Store(true)
	}
	return moved
}

// setBoundary holds the stream at boundary and notes whether everything
// up to it has been handed over already. Commit stores done before it loads the
// boundary, and this stores the boundary before it loads done: one of the
// two sees the other.
func (c *catchupStream) setBoundary(boundary cdc.EventID) {
	c.reached.Store(false)
	c.boundary.Store(&boundary)
	if c.done.Load() >= boundary.CommitLSN {
		c.reached.Store(true)
	}
}

// boundaryOf is the rejoin boundary: the last event the pipeline handed
// over, or, when it has handed over none since it started at start, every
// transaction that committed before start.
func boundaryOf(last cdc.EventID, start uint64) cdc.EventID {
	if !last.IsZero() || start == 0 {
		return last
	}
	return cdc.EventID{CommitLSN: start - 1, Index: math.MaxUint64}
}

// start runs the scheduler and the capture.
func (c *catchupStream) start(ctx context.Context) {
	c.stopSched = make(chan struct{})
	c.schedDone = make(chan struct{})
	c.captDone = make(chan struct{})
	go func() { c.schedErr = c.sched.Run(ctx, c.stopSched); close(c.schedDone) }()
	cctx, cancel := context.WithCancel(ctx)
	c.stopCapt = cancel
	go func() { c.captErr = c.capt.Run(cctx); close(c.captDone) }()
}

// stop stops reading, lets the batches in flight finish, and confirms
// the final position to the catch-up slot. It returns the scheduler's or
// the capture's error.
func (c *catchupStream) stop(ctx context.Context) error {
	if c.stopCalled {
		return nil
	}
	c.stopCalled = true
	c.stopCapt()
	<-c.captDone
	close(c.stopSched)
	<-c.schedDone
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	c.capt.Close(fctx)
	if c.schedErr != nil {
		return c.schedErr
	}
	return c.captErr
}

// behind is how far, in WAL bytes, this stream is behind main: from what
// its sink has resolved (the position its tracker releases), not from
// what its capture received. The first keepalive of the catch-up slot's
// walsender reports the server's WAL end before a single event was read,
// and a sink that has read its backlog has not delivered it: a rejoin on
// either would hand over a backlog that fills the pipeline's queue and
// holds the other sinks back again.
func (c *catchupStream) behind(main uint64) int64 {
	if c.capt.Received() == 0 {
		return math.MaxInt64 // nothing heard from the slot yet
	}
	done := c.tracker.Flush()
	if done >= main {
		return 0
	}
	return int64(main - done)
}
