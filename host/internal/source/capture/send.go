package capture

import (
	"context"
	"time"

	"github.com/walcast/walcast/host/internal/change"
)

// Send puts v on ch, blocking while ch is full — the way a Consumer applies
// backpressure — and calls idle every change.IdleEvery meanwhile, so that the
// capture loop keeps answering the server. It returns ctx's error if ctx
// ends first.
func Send[T any](ctx context.Context, ch chan<- T, v T, idle func()) error {
	select {
	case ch <- v:
		return nil
	default:
	}
	t := time.NewTicker(change.IdleEvery)
	defer t.Stop()
	for {
		select {
		case ch <- v:
			return nil
		case <-t.C:
			idle()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
