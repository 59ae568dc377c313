package schedule

import (
	"math"
	"time"
)

// bucket is a token bucket: rate tokens per second, holding at most one
// second's worth (at least one batch's worth is never needed: batches are
// cut to what the bucket holds). It starts empty so that the measured rate
// never exceeds the limit, even over the first second.
type bucket struct {
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

func newBucket(rate float64, now time.Time) *bucket {
	return &bucket{rate: rate, burst: max(1, rate), last: now}
}

func (b *bucket) refill(now time.Time) {
	if now.After(b.last) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
		b.last = now
	}
}

// available returns how many whole events may go now and, when none, when
// the next one may. That moment is rounded up to the nanosecond: truncated,
// a bucket a hair short of one token answered "now", and the scheduler
// woke again at once to find it still short.
func (b *bucket) available(now time.Time) (int, time.Time) {
	b.refill(now)
	if b.tokens >= 1 {
		return int(b.tokens), time.Time{}
	}
	return 0, now.Add(time.Duration(math.Ceil((1 - b.tokens) / b.rate * float64(time.Second))))
}

func (b *bucket) take(n int) { b.tokens -= float64(n) }
