package bench

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// series is n changes committed evenly over 9 s from t0, the i-th with
// latency lat(i).
func series(t0 time.Time, n int, lat func(i int) time.Duration) ([]time.Time, []time.Duration) {
	commit := make([]time.Time, n)
	d := make([]time.Duration, n)
	for i := range n {
		commit[i] = t0.Add(time.Duration(i) * 9 * time.Second / time.Duration(n))
		d[i] = lat(i)
	}
	return commit, d
}

// TestLatencySustained checks the definition of a sustained rate on made-up
// arrivals: flat latency is sustained, latency that climbs with time is
// not, and neither is a rate the writers did not reach or whose changes
// did not all arrive.
func TestLatencySustained(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	end := t0.Add(9 * time.Second)
	flat := func(i int) time.Duration { return time.Duration(3+i%5) * time.Millisecond }
	growing := func(i int) time.Duration { return time.Duration(3+i/10) * time.Millisecond }
	cases := []struct {
		name     string
		lat      func(int) time.Duration
		achieved float64
		arrived  error
		want     string // "" sustained, else a part of Why
	}{
		{"flat", flat, 1000, nil, ""},
		{"growing", growing, 1000, nil, "latency grew"},
		{"writers short", flat, 900, nil, "writers reached only"},
		{"not all arrived", flat, 1000, errors.New("90 of 100 changes arrived within 1m0s"), "90 of 100"},
	}
	for _, c := range cases {
		l := Latency{Rate: 1000, Achieved: c.achieved}
		commit, lat := series(t0, 900, c.lat)
		// The warm-up change, committed before the window, is left out.
		commit, lat = append(commit, t0.Add(-time.Second)), append(lat, time.Hour)
		l.summarise(commit, lat, t0, end)
		l.judge(c.arrived)
		if l.Events != 900 || l.Maxms >= 3600_000 {
			t.Errorf("%s: %d events, max %.1f ms: the warm-up change was counted", c.name, l.Events, l.Maxms)
		}
		if c.want == "" && !l.Sustained || c.want != "" && (l.Sustained || !strings.Contains(l.Why, c.want)) {
			t.Errorf("%s: sustained %v (%s), want %q", c.name, l.Sustained, l.Why, c.want)
		}
	}
}

// TestPathResultsBestAndMedian checks that the best run and both ratios
// come from the right runs.
func TestPathResultsBestAndMedian(t *testing.T) {
	runs := map[string][]Drain{
		PathRecvlogical: {{ChangesPerSec: 100}, {ChangesPerSec: 140}, {ChangesPerSec: 120}},
		PathStdout:      {{ChangesPerSec: 300}, {ChangesPerSec: 200}, {ChangesPerSec: 210}},
		PathConduit:     nil, // skipped
	}
	res := pathResults([]string{PathRecvlogical, PathConduit, PathStdout}, runs)
	if len(res) != 2 {
		t.Fatalf("%d results, want 2 (the skipped path left out)", len(res))
	}
	s := res[1]
	if s.Best.ChangesPerSec != 300 || s.Median.ChangesPerSec != 210 || s.RatioBest != 300.0/140 || s.Ratio != 210.0/120 {
		t.Errorf("stdout: best %.0f, median %.0f, ratio best %.3f, ratio median %.3f", s.Best.ChangesPerSec, s.Median.ChangesPerSec, s.RatioBest, s.Ratio)
	}
}
