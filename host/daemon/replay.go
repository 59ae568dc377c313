package daemon

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/checkpoint"
)

// listenReplays hands `walcast replay` requests to the sinks' schedulers.
// The CLI stores a request in walcast.replay_requests and NOTIFYs; the
// table is also polled now and then so that a notification lost while this
// connection was down still gets served.
func listenReplays(ctx context.Context, dsn string, store *checkpoint.Store, runs []*sinkRun, log *slog.Logger) {
	serve := func() {
		reqs, err := store.TakeReplayRequests(ctx)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("read replay requests", "err", err)
			}
			return
		}
		for _, req := range reqs {
			found := false
			for _, r := range runs {
				if r.cfg.ID == req.Sink {
					found = true
					if err := r.sched.Replay(ctx, req); err != nil {
						return
					}
				}
			}
			if !found {
				log.Warn("replay requested for an unknown sink", "sink", req.Sink)
			}
		}
	}
	backoff := time.Second
	for ctx.Err() == nil {
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			_, err = conn.Exec(ctx, "LISTEN "+checkpoint.ReplayChannel)
		}
		if err != nil {
			if conn != nil {
				conn.Close(context.Background())
			}
			if ctx.Err() == nil {
				log.Debug("replay listener: connect", "err", err)
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
		serve() // requests made while nobody listened
		for ctx.Err() == nil {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := conn.WaitForNotification(wctx)
			cancel()
			if err != nil && ctx.Err() == nil && wctx.Err() == nil {
				break // connection lost: reconnect
			}
			serve() // notified, or the periodic poll
		}
		conn.Close(context.Background())
	}
}
