package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	controlplane "github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/control/pauses"
	"github.com/walcast/walcast/host/internal/delivery/schedule"
	"github.com/walcast/walcast/host/internal/pg"
)

// control applies what the CLI asks of a running daemon through the
// walcast schema: replay requests (walcast replay) and pauses (walcast
// pause/resume). The CLI writes its request and NOTIFYs; the tables are
// also polled now and then, so a notification lost while the listening
// connection was down only delays.
type control struct {
	parked *parking.Store
	pauses *pauses.Store
	runs   []*sinkRun
	log    *slog.Logger
	// backfill is woken on every notification: a backfill may have been
	// requested or cancelled.
	backfill interface{ Wake() }

	// Replay requests being handled, by their id: a request stays stored
	// until its replay ended, so every serve reads it again.
	mu       sync.Mutex
	handling map[int64]bool
	replays  sync.WaitGroup
}

// applyPauses reads the pause state and hands it to every scheduler.
func (c *control) applyPauses(ctx context.Context) error {
	p, err := c.pauses.LoadPauses(ctx)
	if err != nil {
		return err
	}
	for _, r := range c.runs {
		_, paused := p.Paused(r.cfg.ID)
		r.setPaused(paused)
	}
	return nil
}

// serve handles what is pending: pauses first, so a replay asked for a
// paused sink waits for resume like everything else. A failed read is
// tried again at the next notification or poll, unless retrying cannot
// fix it (pg.Permanent): that error is returned.
func (c *control) serve(ctx context.Context) error {
	if c.backfill != nil {
		c.backfill.Wake()
	}
	if err := c.applyPauses(ctx); err != nil {
		if pg.Permanent(err) {
			return err
		}
		if ctx.Err() == nil {
			c.log.Warn("read pauses", "err", err)
		}
		return nil
	}
	reqs, err := c.parked.ReplayRequests(ctx)
	if err != nil {
		if pg.Permanent(err) {
			return err
		}
		if ctx.Err() == nil {
			c.log.Warn("read replay requests", "err", err)
		}
		return nil
	}
	for _, req := range reqs {
		var run *sinkRun
		for _, r := range c.runs {
			if r.cfg.ID == req.Sink {
				run = r
			}
		}
		if run == nil {
			c.log.Warn("replay requested for an unknown sink", "sink", req.Sink)
			c.done(ctx, req)
			continue
		}
		c.mu.Lock()
		if c.handling == nil {
			c.handling = map[int64]bool{}
		}
		busy := c.handling[req.Seq]
		c.handling[req.Seq] = true
		c.mu.Unlock()
		if !busy {
			c.log.Info("replay requested", "sink", req.Sink, "request", req.Seq)
			c.replays.Go(func() { c.replay(ctx, run, req) })
		}
	}
	return nil
}

// replay hands one request to the sink's scheduler and forgets it once
// the replay ended. The scheduler may stop first: a sink that detaches or
// rejoins swaps it (package isolate), and what the old one had loaded but
// not delivered stays parked. The request then goes to the scheduler that
// delivers now. When ctx ends first the request stays stored for the next
// run.
func (c *control) replay(ctx context.Context, r *sinkRun, req parking.ReplayRequest) {
	defer func() {
		c.mu.Lock()
		delete(c.handling, req.Seq)
		c.mu.Unlock()
	}()
	// The row an --id request names: should the event itself have been
	// delivered by a scheduler that then stopped, the rest of its row is
	// still asked for.
	row := ""
	if !req.ID.IsZero() {
		row, _ = c.parked.ParkedRowOf(ctx, req.Sink, req.ID)
	}
	retried := false
	for {
		var err error
		select {
		case err = <-r.scheduler().ReplayWait(ctx, req):
		case <-ctx.Done():
			return
		}
		if !errors.Is(err, schedule.ErrStopped) {
			if err != nil && ctx.Err() == nil {
				c.log.Warn("replay", "sink", req.Sink, "err", err)
			}
			if ctx.Err() == nil {
				c.done(ctx, req)
			}
			return
		}
		// Once per request at info: while the pipeline stops this repeats
		// until the listener does.
		level := slog.LevelDebug
		if !retried {
			level, retried = slog.LevelInfo, true
		}
		c.log.Log(ctx, level, "the sink's scheduler stopped before the replay ended; asking the one that delivers now", "sink", req.Sink)
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		if row != "" {
			left, err := c.parked.ListParked(ctx, req.Sink, row)
			if err != nil {
				continue
			}
			if len(left) == 0 {
				c.done(ctx, req)
				return
			}
			req.ID = left[0].Event.ID
		}
	}
}

// done forgets a handled request. Should that fail, the next serve reads
// it again and replays what is still parked: harmless.
func (c *control) done(ctx context.Context, req parking.ReplayRequest) {
	if err := c.parked.DoneReplayRequest(ctx, req.Seq); err != nil && ctx.Err() == nil {
		c.log.Warn("forget replay request", "err", err)
	}
}

// listen serves requests until ctx ends (nil): on every notification and
// at least every poll interval. An error retrying cannot fix (the role may
// no longer log in, or read walcast's tables) ends it with that error.
func (c *control) listen(ctx context.Context, dsn string, poll time.Duration) error {
	defer c.replays.Wait()
	backoff := time.Second
	for ctx.Err() == nil {
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			_, err = conn.Exec(ctx, "LISTEN "+controlplane.Channel)
		}
		if err != nil {
			if conn != nil {
				conn.Close(context.Background())
			}
			if pg.Permanent(err) && ctx.Err() == nil {
				return fmt.Errorf("control listener: %w", err)
			}
			if ctx.Err() == nil {
				c.log.Debug("control listener: connect", "err", err)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		err = c.serve(ctx) // requests made while nobody listened
		for err == nil && ctx.Err() == nil {
			wctx, cancel := context.WithTimeout(ctx, poll)
			_, werr := conn.WaitForNotification(wctx)
			polled := wctx.Err() != nil // read before cancel, which sets it
			cancel()
			if werr != nil && ctx.Err() == nil && !polled {
				break // connection lost: reconnect
			}
			err = c.serve(ctx) // notified, or the periodic poll
		}
		conn.Close(context.Background())
		if err != nil {
			return fmt.Errorf("control listener: %w", err)
		}
	}
	return nil
}
