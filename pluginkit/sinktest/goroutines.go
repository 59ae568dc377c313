package sinktest

import (
	"bytes"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// ignoredGoroutines are functions that, found in a goroutine's stack,
// mark it as the runtime's or the test framework's rather than the sink's:
// they start lazily, at most once per process.
var ignoredGoroutines = []string{
	"os/signal.signal_recv",
	"os/signal.loop",
	"runtime.ensureSigM",
	"testing.(*T).Run(",
	"testing.(*M).",
	"testing.runFuzzing",
	"sinktest.(*node).Run(",
}

// goroutines returns the ids of every goroutine alive now.
func goroutines() map[uint64]bool {
	ids := make(map[uint64]bool)
	for _, g := range stacks()[1:] {
		ids[g.id] = true
	}
	return ids
}

type goroutine struct {
	id    uint64
	stack string
}

// stacks returns every goroutine's stack, the caller's first (that is how
// runtime.Stack orders them).
func stacks() []goroutine {
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var gs []goroutine
	for _, block := range bytes.Split(buf, []byte("\n\n")) {
		// "goroutine 42 [chan receive]:\n..."
		head, _, _ := bytes.Cut(block, []byte(" ["))
		id, err := strconv.ParseUint(string(bytes.TrimPrefix(head, []byte("goroutine "))), 10, 64)
		if err != nil {
			continue
		}
		gs = append(gs, goroutine{id: id, stack: string(block)})
	}
	return gs
}

// leaked returns the stacks of goroutines that were not alive in baseline,
// other than the caller and the ones in ignoredGoroutines.
func leaked(baseline map[uint64]bool) []string {
	var out []string
	gs := stacks()
	if len(gs) == 0 {
		return nil
	}
	for _, g := range gs[1:] {
		if baseline[g.id] || ignored(g.stack) {
			continue
		}
		out = append(out, g.stack)
	}
	return out
}

func ignored(stack string) bool {
	for _, f := range ignoredGoroutines {
		if strings.Contains(stack, f) {
			return true
		}
	}
	return false
}

// settle polls until no goroutine outside baseline is left or timeout
// passes, and returns the stacks of those still running. Goroutines a sink
// stopped in Close may need a moment to unwind (a connection's reader
// noticing the close), hence the polling.
func settle(baseline map[uint64]bool, timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		left := leaked(baseline)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		pause(delay)
	}
}
