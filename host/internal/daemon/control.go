package daemon

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/checkpoint"
)

// control applies what the CLI asks of a running daemon through the
// walcast schema: replay requests (walcast replay) and pauses (walcast
// pause/resume). The CLI writes its request and NOTIFYs; the tables are
// also polled now and then, so a notification lost while the listening
// connection was down only delays.
type control struct {
	store *checkpoint.Store
	runs  []*sinkRun
	log   *slog.Logger
	// backfill is woken on every notification: a backfill may have been
	// requested or cancelled.
	backfill interface{ Wake() }
}

// applyPauses reads the pause state and hands it to every scheduler.
func (c *control) applyPauses(ctx context.Context) error {
	p, err := c.store.LoadPauses(ctx)
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
// paused sink waits for resume like everything else.
func (c *control) serve(ctx context.Context) {
	if c.backfill != nil {
		c.backfill.Wake()
	}
	if err := c.applyPauses(ctx); err != nil {
		if ctx.Err() == nil {
			c.log.Warn("read pauses", "err", err)
		}
		return
	}
	reqs, err := c.store.TakeReplayRequests(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warn("read replay requests", "err", err)
		}
		return
	}
	for _, req := range reqs {
		found := false
		for _, r := range c.runs {
			if r.cfg.ID == req.Sink {
				found = true
				if err := r.scheduler().Replay(ctx, req); err != nil {
					return
				}
			}
		}
		if !found {
			c.log.Warn("replay requested for an unknown sink", "sink", req.Sink)
		}
	}
}

// listen serves requests until ctx ends: on every notification and at
// least every poll interval.
func (c *control) listen(ctx context.Context, dsn string, poll time.Duration) {
	backoff := time.Second
	for ctx.Err() == nil {
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			_, err = conn.Exec(ctx, "LISTEN "+checkpoint.ControlChannel)
		}
		if err != nil {
			if conn != nil {
				conn.Close(context.Background())
			}
			if ctx.Err() == nil {
				c.log.Debug("control listener: connect", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		c.serve(ctx) // requests made while nobody listened
		for ctx.Err() == nil {
			wctx, cancel := context.WithTimeout(ctx, poll)
			_, err := conn.WaitForNotification(wctx)
			polled := wctx.Err() != nil // read before cancel, which sets it
			cancel()
			if err != nil && ctx.Err() == nil && !polled {
				break // connection lost: reconnect
			}
			c.serve(ctx) // notified, or the periodic poll
		}
		conn.Close(context.Background())
	}
}
