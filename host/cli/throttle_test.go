package cli

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestThrottleRetryAfterEdges: a real webhook receiver answers 429 for
// three seconds with a Retry-After the sink cannot take at its word: 0, an
// HTTP date in the past (both would mean "retry at once", in a loop), and
// 4294967295 (136 years). The sink (16 rows, batch_size 1, max_in_flight
// 8, throttle_min 500ms, throttle_max 1s) must pause at least the floor
// and at most the ceiling, so the receiver counts a handful of requests,
// not thousands, and every row arrives once it stops throttling. After
// the first throttle (which every lane's request gets at once) each pause
// ends with one request alone, never eight at the same instant. Throttles
// are not attempts: max_attempts = 1 parks nothing.
func TestThrottleRetryAfterEdges(t *testing.T) {
	const window, floor, ceiling = 3 * time.Second, 500 * time.Millisecond, time.Second
	for _, tc := range []struct {
		name       string
		retryAfter func() string
		minGap     time.Duration // the pause the first throttle must cause at least
	}{
		{"zero", func() string { return "0" }, floor},
		{"past_date", func() string { return time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat) }, floor},
		{"huge", func() string { return "4294967295" }, ceiling},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
			rcv := newReceiver(t)
			type request struct {
				start, end time.Time
				throttled  bool
			}
			var mu sync.Mutex
			var reqs []request
			var until time.Time // throttling ends; set by the first request
			rcv.setRespond(func(http.Header, []byte, []received) (int, http.Header) {
				mu.Lock()
				now := time.Now()
				if until.IsZero() {
					until = now.Add(window)
				}
				throttle := now.Before(until)
				reqs = append(reqs, request{start: now, throttled: throttle})
				i := len(reqs) - 1
				mu.Unlock()
				if !throttle {
					mu.Lock()
					reqs[i].end = time.Now()
					mu.Unlock()
					return 0, nil
				}
				// Long enough for requests sent together to overlap here.
				time.Sleep(50 * time.Millisecond)
				mu.Lock()
				reqs[i].end = time.Now()
				mu.Unlock()
				return http.StatusTooManyRequests, http.Header{"Retry-After": {tc.retryAfter()}}
			})
			name := "throttle_" + tc.name
			pipeline := writePipeline(t, name, dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL, Batch: 1,
				Extra: "    max_in_flight = 8\n    max_attempts = 1\n    throttle_min = \"500ms\"\n    throttle_max = \"1s\"\n"})
			proc := startCapturing(t, db, pipeline)
			exec1(t, db, `INSERT INTO items SELECT g, 0 FROM generate_series(1, 16) g`)
			waitFor(t, "all 16 rows once the receiver stops throttling", 2*time.Minute, func() bool { return rcv.distinct() == 16 })
			proc.stop()

			mu.Lock()
			defer mu.Unlock()
			throttled := 0
			var first429 time.Time
			for _, r := range reqs {
				if r.throttled {
					throttled++
					if first429.IsZero() || r.end.Before(first429) {
						first429 = r.end
					}
				}
			}
			t.Logf("Retry-After %q: %d requests in all, %d answered 429 in %s", tc.retryAfter(), len(reqs), throttled, window)
			// 8 at once, then one per pause: about 3 pauses of 0.5-1 s fit in
			// the window. Before the clamp: 10,000s of requests (0, past
			// date), or none after the first (the 136-year pause).
			if throttled > 20 {
				t.Errorf("%d requests answered 429 within %s; want a handful (pauses of %s to %s)", throttled, window, floor, ceiling)
			}
			// The first request after the first throttle waits the pause.
			for _, r := range reqs {
				if r.start.After(first429) && r.start.Sub(first429) < 100*time.Millisecond {
					continue // sent together with the first, before the host heard of the 429
				}
				if r.start.After(first429) {
					if gap := r.start.Sub(first429); gap < tc.minGap*9/10 {
						t.Errorf("a request came %s after the first 429 (Retry-After %q); want a pause of at least %s", gap, tc.retryAfter(), tc.minGap)
					}
					break
				}
			}
			// Each later pause ends with one request alone. Requests that
			// reached the receiver within 250 ms of the first 429 may have
			// left the host before it heard of it; leave them out.
			for i, r := range reqs {
				if !r.throttled || r.start.Sub(first429) < 250*time.Millisecond {
					continue
				}
				for j, o := range reqs {
					if j != i && o.start.Before(r.end) && o.end.After(r.start) {
						t.Errorf("request %d (429) overlapped request %d after a pause: want one request, not every lane at once", i, j)
						return
					}
				}
			}
			var parked int
			db.QueryRow(context.Background(), `SELECT count(*) FROM walcast.parked`).Scan(&parked)
			if parked != 0 {
				t.Errorf("%d events parked: a throttle is not an attempt", parked)
			}
			if log := proc.logText(); !strings.Contains(log, "sink throttled; pausing") {
				t.Errorf("walcast logged no throttle pause:\n%s", tail(log, 20))
			}
		})
	}
}
