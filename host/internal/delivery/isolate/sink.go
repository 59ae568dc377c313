package isolate

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/host/internal/delivery/fanout"
	"github.com/walcast/walcast/host/internal/delivery/schedule"
	"github.com/walcast/walcast/host/internal/source/capture"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Config describes one durable sink of a pipeline to Sink.
type Config struct {
	SinkID string
	// Index is the sink's index in the pipeline's tracker and fan-out.
	Index   int
	Policy  Policy
	Slots   *Slots
	Fanout  *fanout.Fanout
	Tracker *ack.Tracker
	// Start is the position the pipeline's tracker started from.
	Start uint64
	// Received is the highest WAL position the pipeline's capture has
	// seen.
	Received func() uint64
	// Capture is the pipeline's capture configuration; catch-up streams
	// use it with their own slot.
	Capture capture.Config
	// QueueSize is the capacity of the sink's queues.
	QueueSize int
	// Format is the sink's queue format (fanout.Queue.Format); Capture
	// writes the same formats as the pipeline's capture.
	Format int
	// NewScheduler returns a scheduler for the sink reading q and
	// resolving into sink index of t, skipping the events at or below
	// position (delivered before).
	NewScheduler func(q *fanout.Queue, t *ack.Tracker, index int, position cdc.EventID) *schedule.Scheduler
	// Live is the scheduler the sink starts with (on the pipeline's
	// queue), unless ResumeSlot is set.
	Live *schedule.Scheduler
	// ResumeSlot, when set, is the catch-up slot a previous run left: the
	// sink starts catching up from it. The caller has detached the sink
	// from the fan-out already.
	ResumeSlot string
	Logger     *slog.Logger
}

// Sink runs one durable sink through live, catching-up and rejoining.
type Sink struct {
	cfg  Config
	log  *slog.Logger
	mode atomic.Int32

	mu      sync.Mutex
	paused  bool
	live    *schedule.Scheduler // while live or rejoining (not yet running then)
	catchup *catchupStream      // while catching up or rejoining
	// slot of the sink (catching up, rejoining, or a drop that failed).
	slot      string
	dropLater bool
	// stats accumulates the counters of schedulers that stopped, so that
	// counters never go back.
	stats schedule.Stats

	// Owned by Run: the catch-up stream's failed attempts when last
	// looked at and when they last grew; when a called-off rejoin may be
	// tried again, and the wait after the next one called off.
	failures int64
	failedAt time.Time
	// The same for the live scheduler.
	liveFailures  int64
	liveFailedAt  time.Time
	rejoinAfter   time.Time
	rejoinBackoff time.Duration

	liveStop chan struct{}
	liveDone chan struct{}
	liveErr  error
	// Detached counts detachments; Rejoined completed rejoins.
	Detached, Rejoined atomic.Int64
	// timeouts counts the catch-up streams ended for silence, over every
	// catch-up stream the sink had.
	timeouts capture.ReceiveTimeouts
}

// NewSink returns the sink; call Run.
func NewSink(cfg Config) *Sink {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Sink{cfg: cfg, log: cfg.Logger.With("sink", cfg.SinkID), live: cfg.Live}
	return s
}

// Mode is the sink's mode now.
func (s *Sink) Mode() Mode { return Mode(s.mode.Load()) }

// Scheduler is the scheduler delivering now: the catch-up one while
// catching up or rejoining.
func (s *Sink) Scheduler() *schedule.Scheduler {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.catchup != nil {
		return s.catchup.sched
	}
	return s.live
}

// Stats sums the counters of every scheduler the sink ran, and the gauges
// of the one delivering now.
func (s *Sink) Stats() *schedule.Stats {
	cur := s.Scheduler()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &schedule.Stats{}
	addStats(out, &s.stats)
	addStats(out, &cur.Stats)
	out.Held.Store(cur.Stats.Held.Load())
	out.InFlight.Store(cur.Stats.InFlight.Load())
	out.LastSuccess.Store(max(s.stats.LastSuccess.Load(), cur.Stats.LastSuccess.Load()))
	return out
}

func addStats(dst, src *schedule.Stats) {
	for _, p := range [][2]*atomic.Int64{
		{&dst.Delivered, &src.Delivered}, {&dst.Bytes, &src.Bytes}, {&dst.Skipped, &src.Skipped},
		{&dst.Filtered, &src.Filtered}, {&dst.Attempts, &src.Attempts}, {&dst.Failures, &src.Failures},
		{&dst.Throttles, &src.Throttles}, {&dst.Duplicates, &src.Duplicates}, {&dst.Parked, &src.Parked},
		{&dst.Replayed, &src.Replayed},
	} {
		p[0].Add(p[1].Load())
	}
}

// SetPaused pauses or resumes whichever scheduler delivers.
func (s *Sink) SetPaused(p bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paused = p
	if s.live != nil {
		s.live.SetPaused(p)
	}
	if s.catchup != nil {
		s.catchup.sched.SetPaused(p)
	}
}

// Position is the sink's position while it is detached (its catch-up
// tracker's); ok is false while it is live, when the pipeline's tracker
// has it.
func (s *Sink) Position() (id cdc.EventID, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.catchup == nil {
		return id, false
	}
	return s.catchup.tracker.Positions()[0], true
}

// Lag is what /metrics shows: the catch-up stream's distance behind the
// pipeline's in WAL bytes, and its catch-up slot ("" when live).
func (s *Sink) Lag() (behindBytes int64, slot string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.catchup == nil {
		return 0, ""
	}
	b := s.catchup.behind(s.cfg.Received())
	if b < 0 || b == 1<<63-1 {
		b = 0
	}
	return b, s.catchup.slot
}

// ReceiveTimeouts counts the sink's catch-up streams that were ended
// because nothing arrived within the receive timeout.
func (s *Sink) ReceiveTimeouts() *capture.ReceiveTimeouts { return &s.timeouts }

// CatchupStream describes the catch-up stream while the sink is detached:
// its slot, whether it streams now (false while it reconnects), and its
// receive timeout. slot is "" while the sink is live.
func (s *Sink) CatchupStream() (slot string, streaming bool, timeout time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.catchup == nil {
		return "", false, 0
	}
	_, timeout = s.catchup.capt.Silence()
	return s.catchup.slot, s.catchup.capt.Streaming(), timeout
}

// tick is how often Run looks at the sink: a small part of the default
// detach_after, so that a sink holding the others back is detached close
// to the threshold, not up to a tick later.
const tick = 25 * time.Millisecond

// Run runs the sink until stop is closed (it lets deliveries in flight
// finish, confirms the catch-up slot's position, returns nil) or ctx ends
// (it abandons them), or a scheduler or the catch-up stream fails.
func (s *Sink) Run(ctx context.Context, stop <-chan struct{}) (err error) {
	if s.cfg.ResumeSlot != "" {
		position := s.cfg.Tracker.Positions()[s.cfg.Index]
		confirmed, err := Confirmed(ctx, s.cfg.Slots.db, s.cfg.ResumeSlot)
		if err != nil {
			return err
		}
		s.log.Info("sink resumes catching up from its slot", "slot", s.cfg.ResumeSlot, "position", position.String())
		s.startCatchup(ctx, s.cfg.ResumeSlot, confirmed, position, nil)
	} else {
		s.startLive(ctx, s.live)
	}
	defer func() {
		s.mu.Lock()
		stream := s.catchup
		s.mu.Unlock()
		if stream != nil {
			if cerr := stream.stop(ctx); err == nil && ctx.Err() == nil {
				err = cerr
			}
		}
		if s.liveDone != nil {
			select {
			case <-s.liveStop:
			default:
				close(s.liveStop)
			}
			<-s.liveDone
			if err == nil {
				err = s.liveErr
			}
		}
	}()
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		var catchupSched, catchupCapt <-chan struct{}
		if stream := s.catchup; stream != nil {
			catchupSched, catchupCapt = stream.schedDone, stream.captDone
		}
		select {
		case <-stop:
			return nil
		case <-ctx.Done():
			return nil
		case <-s.liveDone:
			if s.liveErr != nil {
				return s.liveErr
			}
			return nil
		case <-catchupSched:
			return s.catchup.schedErr
		case <-catchupCapt:
			if s.catchup.captErr != nil {
				return fmt.Errorf("catch-up slot %s: %w", s.catchup.slot, s.catchup.captErr)
			}
			return nil
		case <-t.C:
		}
		if err := s.step(ctx); err != nil {
			return err
		}
	}
}

// step observes the sink and acts on the policy's decision.
func (s *Sink) step(ctx context.Context) error {
	now := time.Now()
	s.mu.Lock()
	paused := s.paused
	s.mu.Unlock()
	o := Observation{Mode: s.Mode(), Paused: paused}
	if q := s.cfg.Fanout.Queue(s.cfg.Index); q != nil {
		o.BlockedFor = q.BlockedFor(now)
	}
	switch o.Mode {
	case Live:
		_, o.BacklogBytes, _ = s.cfg.Tracker.Backlog(s.cfg.Index)
		if q := s.cfg.Fanout.Queue(s.cfg.Index); q != nil {
			o.QueueHalfFull = 2*len(q.C) > cap(q.C)
		}
		st := &s.live.Stats
		if f := st.Failures.Load(); f != s.liveFailures {
			s.liveFailures, s.liveFailedAt = f, now
		}
		o.Failing = now.Sub(s.liveFailedAt) < time.Second && st.LastSuccess.Load() < s.liveFailedAt.UnixNano()
		if s.dropLater {
			s.dropLeftover(ctx)
		}
	case CatchingUp:
		o.BehindBytes = s.catchup.behind(s.cfg.Received())
		o.CatchupFull = s.catchup.tracker.Pending(0) > s.cfg.QueueSize/2
		if f := s.catchup.sched.Stats.Failures.Load(); f != s.failures {
			s.failures, s.failedAt = f, now
		}
		o.Failing = now.Sub(s.failedAt) < time.Second
		o.Backoff = now.Before(s.rejoinAfter)
		o.Delivering = now.UnixNano()-s.catchup.sched.Stats.LastSuccess.Load() < int64(time.Second)
	}
	switch s.cfg.Policy.Decide(o) {
	case Detach:
		if o.Mode == Rejoining {
			s.abortRejoin(ctx, o)
			return nil
		}
		if s.dropLater {
			return nil // the previous slot is still there; try again once it is dropped
		}
		return s.detach(ctx, o)
	case Rejoin:
		s.rejoin(ctx)
	}
	if s.Mode() == Rejoining && s.catchup.reached.Load() && s.catchup.tracker.Idle() {
		return s.completeRejoin(ctx)
	}
	return nil
}

func (s *Sink) startLive(ctx context.Context, sched *schedule.Scheduler) {
	s.liveFailures, s.liveFailedAt = 0, time.Time{}
	s.liveStop = make(chan struct{})
	s.liveDone = make(chan struct{})
	s.liveErr = nil
	stop, done := s.liveStop, s.liveDone
	go func() { s.liveErr = sched.Run(ctx, stop); close(done) }()
}

// detach copies the pipeline's slot while the sink still holds it, then
// detaches the sink and starts its catch-up stream.
func (s *Sink) detach(ctx context.Context, o Observation) error {
	s.log.Warn("sink falls behind: detaching it to catch up on its own slot",
		"blocked_for", o.BlockedFor.Round(time.Millisecond), "paused", o.Paused, "failing", o.Failing, "backlog_bytes", o.BacklogBytes)
	slot, confirmed, err := s.cfg.Slots.Create(ctx, s.cfg.SinkID)
	if err != nil {
		// Nothing changed: the sink stays live and holds the stream back
		// as before; the next tick tries again.
		s.log.Warn("could not create the catch-up slot; the sink stays live", "err", err)
		return nil
	}
	s.cfg.Fanout.Detach(s.cfg.Index)
	s.mode.Store(int32(CatchingUp))
	// The live scheduler finishes its batches in flight before anything
	// of the same rows is delivered from the catch-up stream.
	close(s.liveStop)
	<-s.liveDone
	if s.liveErr != nil {
		return s.liveErr
	}
	s.liveDone = nil
	position := s.cfg.Tracker.Positions()[s.cfg.Index]
	s.startCatchup(ctx, slot, confirmed, position, s.live)
	s.Detached.Add(1)
	return nil
}

// startCatchup starts the catch-up stream. retired is the live scheduler
// it replaces (stopped; nil when resuming): it is swapped out under the
// same lock, so that Scheduler never returns nil.
func (s *Sink) startCatchup(ctx context.Context, slot string, confirmed uint64, position cdc.EventID, retired *schedule.Scheduler) {
	tr := ack.New([]ack.SinkSpec{{ID: s.cfg.SinkID, Durable: true}}, confirmed)
	tr.RaisePosition(0, position)
	q := fanout.NewQueue(s.cfg.QueueSize, true)
	q.Sink, q.Format = s.cfg.SinkID, s.cfg.Format
	stream := &catchupStream{slot: slot, tracker: tr, queue: q}
	s.failures = 0
	if confirmed > 0 {
		stream.done.Store(confirmed - 1)
	}
	stream.sched = s.cfg.NewScheduler(q, tr, 0, position)
	ccfg := s.cfg.Capture
	ccfg.Slot = slot
	ccfg.ApplicationName += "-catchup"
	// The confirm limit guards the pipeline's slot, not this copy.
	ccfg.Confirm, ccfg.ConfirmLimit = nil, 0
	ccfg.Watch = nil // the pipeline's capture watches the publication
	// A silent catch-up stream is ended and reconnected like the
	// pipeline's (same receive_timeout), and counted for the sink.
	ccfg.Timeouts = &s.timeouts
	stream.capt = capture.New(ccfg, catchupConsumer{Fanout: fanout.New(tr, []*fanout.Queue{q}), stream: stream})
	s.mu.Lock()
	if retired != nil {
		addStats(&s.stats, &retired.Stats)
	}
	s.live = nil
	stream.sched.SetPaused(s.paused)
	s.catchup = stream
	s.slot = slot
	s.mu.Unlock()
	s.mode.Store(int32(CatchingUp))
	stream.start(ctx)
	s.log.Info("sink catching up", "slot", slot, "position", position.String())
}

// rejoin queues the pipeline's events for the sink again from the next
// one on, and sets the catch-up stream's boundary before them.
func (s *Sink) rejoin(ctx context.Context) {
	q := fanout.NewQueue(s.cfg.QueueSize, true)
	q.Sink, q.Format = s.cfg.SinkID, s.cfg.Format
	position := s.catchup.tracker.Positions()[0]
	last := s.cfg.Fanout.Rejoin(s.cfg.Index, q, position)
	boundary := boundaryOf(last, s.cfg.Start)
	s.catchup.setBoundary(boundary)
	s.mode.Store(int32(Rejoining))
	if err := s.cfg.Slots.SetMode(ctx, s.cfg.SinkID, Rejoining); err != nil {
		s.log.Warn("record mode", "err", err)
	}
	s.log.Info("sink rejoining the live stream", "boundary", boundary.String())
}

// abortRejoin sends a rejoining sink back to catching up: the pipeline's
// stream forgets it again, and the catch-up stream goes on past the
// boundary it was held at.
func (s *Sink) abortRejoin(ctx context.Context, o Observation) {
	s.cfg.Fanout.Detach(s.cfg.Index)
	s.catchup.boundary.Store(nil)
	s.catchup.reached.Store(false)
	s.mode.Store(int32(CatchingUp))
	// Every call-off held the pipeline back for Policy.After: wait longer
	// each time (1 s doubling to a minute) before the next attempt.
	s.rejoinBackoff = min(max(2*s.rejoinBackoff, time.Second), time.Minute)
	s.rejoinAfter = time.Now().Add(s.rejoinBackoff)
	if err := s.cfg.Slots.SetMode(ctx, s.cfg.SinkID, CatchingUp); err != nil {
		s.log.Warn("record mode", "err", err)
	}
	s.log.Info("sink still behind: back to catching up", "blocked_for", o.BlockedFor.Round(time.Millisecond), "paused", o.Paused)
}

// completeRejoin hands over: the catch-up stream has delivered and
// resolved everything up to the boundary, the pipeline's queue holds
// everything after it. The live scheduler starts only after the catch-up
// one stopped; then the slot is dropped and forgotten.
func (s *Sink) completeRejoin(ctx context.Context) error {
	stream := s.catchup
	if err := stream.stop(ctx); err != nil {
		return err
	}
	position := stream.tracker.Positions()[0]
	s.cfg.Tracker.RaisePosition(s.cfg.Index, position)
	live := s.cfg.NewScheduler(s.cfg.Fanout.Queue(s.cfg.Index), s.cfg.Tracker, s.cfg.Index, position)
	s.mu.Lock()
	addStats(&s.stats, &stream.sched.Stats)
	live.SetPaused(s.paused)
	s.live = live
	s.catchup = nil
	s.mu.Unlock()
	s.mode.Store(int32(Live))
	s.startLive(ctx, live)
	s.Rejoined.Add(1)
	s.rejoinBackoff = 0
	s.log.Info("sink rejoined the live stream", "position", position.String())
	s.dropLater = true
	s.dropLeftover(ctx)
	return nil
}

// dropLeftover drops the slot of a completed rejoin; until that works the
// record stays, and a restart would resume catching up from it (safe: it
// holds what the sink needs and the checkpoint filters the rest).
func (s *Sink) dropLeftover(ctx context.Context) {
	if err := s.cfg.Slots.Drop(ctx, s.cfg.SinkID, s.slot); err != nil {
		s.log.Warn("drop catch-up slot; trying again", "slot", s.slot, "err", err)
		return
	}
	s.dropLater = false
	s.slot = ""
}

// Backlog is the catch-up stream's backlog while the sink is detached:
// events read from its slot and not resolved, and their payload bytes.
func (s *Sink) Backlog() (events int, bytes int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.catchup == nil {
		return 0, 0, false
	}
	events, bytes, _ = s.catchup.tracker.Backlog(0)
	return events, bytes, true
}
