package schedule

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestBucketBound drives the bucket on a fake clock, so the result cannot
// depend on how loaded the machine is: a consumer takes at irregular
// moments, with stalls far longer than the bucket's one second, sometimes
// everything on offer and sometimes less. For every pair of takes at
// a <= b, what was taken in [a, b] is at most burst + rate*(b-a), and what
// was taken by b at most rate*(b-start) (the bucket starts empty).
// Nothing is slack here but float rounding.
func TestBucketBound(t *testing.T) {
	const rate, burst = 500.0, 500.0 // the promise: one second's worth
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := newBucket(rate, t0)
	rng := rand.New(rand.NewPCG(1, 2))
	type take struct {
		at time.Time
		n  int
	}
	var takes []take
	now := t0
	for range 4000 {
		switch r := rng.IntN(100); {
		case r < 2: // a stall: the bucket fills up
			now = now.Add(time.Duration(500+rng.IntN(2500)) * time.Millisecond)
		case r < 10: // several takes at the same instant
		default:
			now = now.Add(time.Duration(rng.IntN(20000)) * time.Microsecond)
		}
		n, at := b.available(now)
		if n == 0 {
			if !at.After(now) {
				t.Fatalf("at %s: nothing available, next at %s, not later", now.Sub(t0), at.Sub(t0))
			}
			continue
		}
		if rng.IntN(2) == 0 {
			n = 1 + rng.IntN(n) // a batch cut short
		}
		b.take(n)
		takes = append(takes, take{now, n})
	}
	const eps = 1e-6
	total := 0
	for j, tj := range takes {
		total += tj.n
		if lim := rate * tj.at.Sub(t0).Seconds(); float64(total) > lim+eps {
			t.Fatalf("%d taken by %s, more than %.1f from an empty bucket", total, tj.at.Sub(t0), lim)
		}
		sum := 0
		for i := j; i >= 0; i-- {
			sum += takes[i].n
			if lim := burst + rate*tj.at.Sub(takes[i].at).Seconds(); float64(sum) > lim+eps {
				t.Fatalf("%d taken in [%s, %s], more than burst + rate*(b-a) = %.1f",
					sum, takes[i].at.Sub(t0), tj.at.Sub(t0), lim)
			}
		}
	}
	if len(takes) < 500 {
		t.Fatalf("only %d takes: the test exercised little", len(takes))
	}
}

// TestBucketDoesNotStarve: a consumer that takes everything offered and,
// when nothing is, comes back exactly when the bucket says, gets the full
// rate (one event short at most, the fraction still in the bucket).
func TestBucketDoesNotStarve(t *testing.T) {
	const rate = 200.0
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := newBucket(rate, t0)
	now, total, wakes := t0, 0, 0
	end := t0.Add(10 * time.Second)
	for now.Before(end) {
		n, at := b.available(now)
		if n > 0 {
			b.take(n)
			total += n
			continue
		}
		now = at
		wakes++
	}
	if want := int(rate*end.Sub(t0).Seconds()) - 1; total < want {
		t.Fatalf("took %d in %s, want at least %d", total, end.Sub(t0), want)
	}
	t.Logf("%d events in %d wakes", total, wakes)
}
