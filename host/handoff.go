package host

import (
	"context"
	"sync"
	"time"

	"github.com/walcast/walcast/host/internal/change"
)

// wakeBatch is how many events wait before a Next that is waiting is woken
// in the middle of a transaction; a commit wakes it at once. Handing events
// over one by one on a channel cost a goroutine wake-up per event whenever
// Next kept up with capture (docs/benchmarks.md, "Round 4"); pgoutput
// sends a transaction only once it committed, all of it back to back, so
// waiting for a few dozen of its events delays nothing that a consumer
// could act on (nothing is released before the commit).
const wakeBatch = 64

// handoff passes events from the capture goroutine to Next: capture
// appends to a buffer under a mutex, Next takes the whole buffer at once.
type handoff struct {
	mu sync.Mutex
	// buf holds the events handed over and not yet taken; at most limit.
	buf   []change.Event
	limit int
	// waiting: Next found buf empty and waits on ready.
	waiting bool
	// full: capture found buf full and waits on space.
	full bool
	// ended: capture returned; nothing more will be appended.
	ended bool
	ready chan struct{} // capacity 1: Next should look again
	space chan struct{} // capacity 1: capture should look again
}

// newHandoff bounds what capture reads ahead of Next to about buffer
// events: Next holds at most one taken buffer while capture fills the
// other, each of half the size.
func newHandoff(buffer int) *handoff {
	limit := max(buffer/2, 1)
	return &handoff{
		buf:   make([]change.Event, 0, limit),
		limit: limit,
		ready: make(chan struct{}, 1),
		space: make(chan struct{}, 1),
	}
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// put appends ev, blocking while the buffer is full — the consumer is
// behind, and the changes wait in the slot instead of in memory — and
// calling idle every change.IdleEvery meanwhile so that the capture loop
// keeps answering the server. It returns ctx's error if ctx ends first.
func (h *handoff) put(ctx context.Context, ev change.Event, idle func()) error {
	var tick *time.Ticker
	defer func() {
		if tick != nil {
			tick.Stop()
		}
	}()
	for {
		h.mu.Lock()
		if len(h.buf) < h.limit {
			h.buf = append(h.buf, ev)
			wake := h.waiting && len(h.buf) >= min(wakeBatch, h.limit)
			if wake {
				h.waiting = false
			}
			h.mu.Unlock()
			if wake {
				notify(h.ready)
			}
			return nil
		}
		h.full = true
		wake := h.waiting
		h.waiting = false
		h.mu.Unlock()
		if wake {
			notify(h.ready)
		}
		if tick == nil {
			tick = time.NewTicker(change.IdleEvery)
		}
		select {
		case <-h.space:
		case <-tick.C:
			idle()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// flush wakes a waiting Next for whatever is buffered (at a commit).
func (h *handoff) flush() {
	h.mu.Lock()
	wake := h.waiting && len(h.buf) > 0
	if wake {
		h.waiting = false
	}
	h.mu.Unlock()
	if wake {
		notify(h.ready)
	}
}

// end records that capture returned and wakes Next.
func (h *handoff) end() {
	h.mu.Lock()
	h.ended = true
	h.waiting = false
	h.mu.Unlock()
	notify(h.ready)
}

// take returns the buffered events, waiting until there are some; spare
// (emptied by the caller) becomes the next buffer. It returns no events
// once capture ended and everything was taken, and ctx's error if ctx
// ends first.
func (h *handoff) take(ctx context.Context, spare []change.Event) ([]change.Event, error) {
	clear(spare)
	spare = spare[:0]
	if cap(spare) < h.limit {
		spare = make([]change.Event, 0, h.limit)
	}
	for {
		h.mu.Lock()
		if n := len(h.buf); n > 0 || h.ended {
			out := h.buf
			if n > 0 {
				h.buf = spare
			}
			wasFull := h.full
			h.full = false
			h.mu.Unlock()
			if wasFull {
				notify(h.space)
			}
			return out[:n], nil
		}
		h.waiting = true
		h.mu.Unlock()
		select {
		case <-h.ready:
		case <-ctx.Done():
			h.mu.Lock()
			h.waiting = false
			h.mu.Unlock()
			return nil, ctx.Err()
		}
	}
}
