package schedule

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/pluginkit"
)

// throttleLog records when each Deliver started and ended.
type throttleLog struct {
	mu    sync.Mutex
	calls []call
}

type call struct {
	start, end time.Time
	throttled  bool
}

func (l *throttleLog) begin() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, call{start: time.Now()})
	return len(l.calls) - 1
}

func (l *throttleLog) end(i int, throttled bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls[i].end, l.calls[i].throttled = time.Now(), throttled
}

func (l *throttleLog) snapshot() []call {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]call(nil), l.calls...)
}

// A throttle asking for no pause (Retry-After: 0, a date in the past, or
// a negative pause from a plugin) must not make the scheduler retry at
// once: before the floor, one event throttled for 300 ms took tens of
// thousands of Deliver calls. With the floor (1 s by default) it is
// retried once the floor has passed.
func TestThrottleWithoutPauseDoesNotSpin(t *testing.T) {
	for _, pause := range []time.Duration{0, -5 * time.Second} {
		t.Run(pause.String(), func(t *testing.T) {
			var log throttleLog
			var until time.Time
			var once sync.Once
			sink := &fakeSink{t: t, inFlight: map[string]bool{}, behave: func(context.Context, int, []pluginkit.Event) error {
				once.Do(func() { until = time.Now().Add(300 * time.Millisecond) })
				i := log.begin()
				throttled := time.Now().Before(until)
				log.end(i, throttled)
				if throttled {
					return attempt.Throttled(pause, errors.New("429 Too Many Requests"))
				}
				return nil
			}}
			h := start(t, Config{BatchSize: 10, MaxInFlight: 1}, sink) // default floor
			h.push(1)
			h.waitResolved(30 * time.Second)
			calls := log.snapshot()
			if len(calls) != 2 {
				t.Fatalf("%d Deliver calls for one event throttled with a pause of %s for 300 ms, want 2 (one throttled, one after the 1 s floor)", len(calls), pause)
			}
			if gap := calls[1].start.Sub(calls[0].end); gap < 900*time.Millisecond {
				t.Fatalf("retried %s after a throttle asking for %s; want the 1 s floor", gap, pause)
			}
		})
	}
}

// A throttle asking for a huge pause (Retry-After: 4294967295, 136 years)
// is cut to ThrottleMax.
func TestThrottleIsCutToTheCeiling(t *testing.T) {
	var log throttleLog
	sink := &fakeSink{t: t, inFlight: map[string]bool{}, behave: func(_ context.Context, n int, _ []pluginkit.Event) error {
		i := log.begin()
		log.end(i, n == 1)
		if n == 1 {
			return attempt.Throttled(4294967295*time.Second, errors.New("429 Too Many Requests"))
		}
		return nil
	}}
	h := start(t, Config{BatchSize: 10, MaxInFlight: 1, ThrottleMin: 10 * time.Millisecond, ThrottleMax: 300 * time.Millisecond}, sink)
	h.push(1)
	h.waitResolved(30 * time.Second)
	calls := log.snapshot()
	if gap := calls[1].start.Sub(calls[0].end); gap < 280*time.Millisecond {
		t.Fatalf("retried %s after a throttle; want the pause cut to ThrottleMax (300ms), not shorter", gap)
	}
}

// Consecutive throttles asking for no pause get a pause that doubles from
// ThrottleMin; a delivery resets it.
func TestConsecutiveThrottlesGrowThePause(t *testing.T) {
	const floor = 40 * time.Millisecond
	var log throttleLog
	sink := &fakeSink{t: t, inFlight: map[string]bool{}, behave: func(_ context.Context, n int, _ []pluginkit.Event) error {
		i := log.begin()
		throttled := n <= 4 || n == 6
		log.end(i, throttled)
		if throttled {
			return attempt.Throttled(0, errors.New("429 Too Many Requests"))
		}
		return nil
	}}
	h := start(t, Config{BatchSize: 10, MaxInFlight: 1, ThrottleMin: floor, ThrottleMax: time.Minute}, sink)
	h.push(1)
	h.waitResolved(30 * time.Second)
	h.push(2)
	h.waitResolved(30 * time.Second)
	calls := log.snapshot()
	if len(calls) != 7 {
		t.Fatalf("%d calls, want 7", len(calls))
	}
	// Calls 1-4 throttled: pauses of 1, 2, 4, 8 floors; call 5 delivers;
	// call 6 (the next event) is throttled again: 1 floor.
	want := map[int]time.Duration{1: floor, 2: 2 * floor, 3: 4 * floor, 4: 8 * floor, 6: floor}
	for i, w := range want {
		gap := calls[i].start.Sub(calls[i-1].end)
		if gap < w*9/10 {
			t.Errorf("call %d came %s after throttle %d, want at least %s", i+1, gap, i, w)
		}
	}
	// An upper bound only where growth must not have happened: after the
	// delivery, the pause starts from the floor again.
	if gap := calls[6].start.Sub(calls[5].end); gap > 8*floor {
		t.Errorf("after a delivery the next throttle paused %s, want the floor (%s) again", gap, floor)
	}
}

// After a pause the sink gets one batch; only once that one landed
// unthrottled does it go back to max_in_flight. The batches in flight when
// the throttle came count as one throttle, not eight: the pause does not
// grow with the number of lanes.
func TestThrottleResumesWithOneBatch(t *testing.T) {
	const lanes, floor = 8, 100 * time.Millisecond
	var log throttleLog
	var mu sync.Mutex
	entered := 0
	all := make(chan struct{})
	sink := &fakeSink{t: t, inFlight: map[string]bool{}, behave: func(ctx context.Context, n int, _ []pluginkit.Event) error {
		i := log.begin()
		mu.Lock()
		first := entered < lanes
		if first {
			if entered++; entered == lanes {
				close(all)
			}
		}
		mu.Unlock()
		if first {
			// The first eight wait for each other and are all throttled.
			select {
			case <-all:
			case <-ctx.Done():
			}
			log.end(i, true)
			return attempt.Throttled(0, errors.New("429 Too Many Requests"))
		}
		time.Sleep(20 * time.Millisecond) // long enough for others to start meanwhile
		log.end(i, false)
		return nil
	}}
	h := start(t, Config{BatchSize: 1, MaxInFlight: lanes, ThrottleMin: floor, ThrottleMax: time.Minute}, sink)
	rows := make([]int, 40)
	for i := range rows {
		rows[i] = i
	}
	h.push(rows...)
	h.waitResolved(30 * time.Second)
	calls := log.snapshot()
	lastThrottle := time.Time{}
	for _, c := range calls[:lanes] {
		if !c.throttled {
			t.Fatalf("calls %+v: want the first %d throttled", calls, lanes)
		}
		if c.end.After(lastThrottle) {
			lastThrottle = c.end
		}
	}
	probe := calls[lanes]
	if gap := probe.start.Sub(lastThrottle); gap > 3*time.Second {
		t.Errorf("the first call after %d throttled batches came %s later; want about the floor (%s): one throttle, not %d", lanes, gap, floor, lanes)
	}
	peak := 0
	for i, c := range calls[lanes+1:] {
		if c.start.Before(probe.end) {
			t.Fatalf("call %d started %s before the first call after the pause landed: want one batch until one is delivered",
				lanes+1+i+1, probe.end.Sub(c.start))
		}
		n := 0
		for _, o := range calls[lanes+1:] {
			if !o.start.After(c.start) && o.end.After(c.start) {
				n++
			}
		}
		peak = max(peak, n)
	}
	if peak < 2 {
		t.Errorf("at most %d batch in flight after the first delivery; want the sink back at max_in_flight (%d)", peak, lanes)
	}
}

// throttlePause on its own: the floor doubles per throttle in a row and
// never overflows, whatever the streak and the ceiling.
func TestThrottlePause(t *testing.T) {
	const maxDuration = time.Duration(1<<63 - 1)
	for _, tc := range []struct {
		asked  time.Duration
		n      int
		lo, hi time.Duration
		want   time.Duration
	}{
		{0, 1, time.Second, 10 * time.Minute, time.Second},
		{-time.Hour, 1, time.Second, 10 * time.Minute, time.Second},
		{0, 4, time.Second, 10 * time.Minute, 8 * time.Second},
		{30 * time.Second, 2, time.Second, 10 * time.Minute, 30 * time.Second},
		{30 * time.Second, 7, time.Second, 10 * time.Minute, 64 * time.Second},
		{4294967295 * time.Second, 1, time.Second, 10 * time.Minute, 10 * time.Minute},
		{0, 1000, time.Second, 10 * time.Minute, 10 * time.Minute},
		{0, 1000, time.Second, maxDuration, maxDuration},
	} {
		if got := throttlePause(tc.asked, tc.n, tc.lo, tc.hi); got != tc.want {
			t.Errorf("throttlePause(%s, %d, %s, %s) = %s, want %s", tc.asked, tc.n, tc.lo, tc.hi, got, tc.want)
		}
	}
}
