package schedule

import (
	"time"
)

// Throttling: a sink that answers "throttled, retry after D" (HTTP 429 with
// Retry-After) pauses as a whole; the batch goes back and the attempt is
// not counted. D comes from the destination and cannot be trusted either
// way: Retry-After: 0 or a date already past would have the sink retry at
// once, in a loop, and Retry-After: 4294967295 would pause it for 136
// years. So the pause is clamped: at least ThrottleMin, doubled for each
// further throttle in a row (a destination that keeps answering 429 sees
// fewer and fewer requests), at most ThrottleMax. After a pause the sink
// sends one batch; only once that one is answered without a throttle does
// it go back to max_in_flight, so a throttling destination does not get
// every lane's batch at the same instant.
//
// The batches in flight when a throttle comes were all sent before the
// pause began; their own throttles are the same throttle seen again, not
// further ones: each batch carries the generation it was sent in, and
// only a throttle of the current generation starts a new pause (and a new
// generation).

// throttleState is a scheduler's throttling state, owned by Run.
type throttleState struct {
	gen     uint64 // bumped at each new throttle
	streak  int    // throttles in a row, without an unthrottled answer between
	probing bool   // after a pause: one batch in flight until one is answered
}

// lanes is how many batches may be in flight: one while probing.
func (t *throttleState) lanes(maxInFlight int) int {
	if t.probing {
		return 1
	}
	return maxInFlight
}

// answered notes an answer that was not a throttle to a batch sent in gen:
// when it was sent since the last throttle, the destination takes
// requests again.
func (t *throttleState) answered(gen uint64) {
	if gen == t.gen {
		t.streak, t.probing = 0, false
	}
}

// throttled applies a throttle of a whole batch: the batch goes back, and
// the sink pauses.
func (s *Scheduler) throttled(r result, asked time.Duration) {
	s.Stats.Throttles.Add(1)
	s.pending.putBack(r.batch)
	s.pause(r.gen, asked, r.err)
}

// pause pauses the sink for a throttle of a batch sent in gen that asked
// for asked: for the clamped pause, extended (never shortened) by the
// throttles of the batches that were in flight with it.
func (s *Scheduler) pause(gen uint64, asked time.Duration, err error) {
	t := &s.throttle
	again := gen != t.gen
	if !again {
		t.gen++
		t.streak++
		t.probing = true
	}
	pause := throttlePause(asked, t.streak, s.cfg.ThrottleMin, s.cfg.ThrottleMax)
	if until := time.Now().Add(pause); until.After(s.pausedUntil) {
		s.pausedUntil = until
	}
	if !again {
		s.log.Info("sink throttled; pausing", "pause", pause, "asked", asked, "in_a_row", t.streak, "err", err)
	}
}

// throttlePause is the pause for the n-th throttle in a row that asked for
// asked: asked, but at least lo doubled n-1 times, and at most hi.
func throttlePause(asked time.Duration, n int, lo, hi time.Duration) time.Duration {
	floor := lo
	for i := 1; i < n && floor < hi; i++ {
		if floor > hi/2 {
			floor = hi
			break
		}
		floor *= 2
	}
	return min(max(asked, floor), hi)
}
