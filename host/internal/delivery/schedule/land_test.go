package schedule

import (
	"errors"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/pluginkit"
)

// decide is the delivery policy for one finished attempt, with no I/O:
// every rule of the README's "How a failure is handled" as a table.
func TestDecide(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	pol := policy{maxAttempts: 3, canPark: true, backoff: func(n int) time.Duration { return time.Duration(n) * time.Minute }}
	ev := func(row string, attempts int, iso isolation) *entry {
		return &entry{ev: pluginkit.Event{ID: pluginkit.EventID{CommitLSN: 1, Index: uint64(attempts)}}, row: row, attempts: attempts, isolation: iso}
	}
	boom := errors.New("boom")
	tests := []struct {
		name    string
		batch   []*entry
		err     error
		pol     policy
		verdict verdict
		retry   int
		park    int
		delay   time.Duration
		iso     []isolation // each event's isolation afterwards
	}{
		{name: "delivered", batch: []*entry{ev("a", 0, batchAny)}, verdict: delivered},
		{name: "fatal stops", batch: []*entry{ev("a", 0, batchAny)}, err: attempt.Fatal(boom), verdict: fatal},
		{name: "throttle is not an attempt", batch: []*entry{ev("a", 0, batchAny), ev("b", 0, batchAny)},
			err: attempt.Throttled(time.Second, boom), verdict: throttled, iso: []isolation{batchAny, batchAny}},
		{name: "first failure retries the batch whole", batch: []*entry{ev("a", 0, batchAny), ev("b", 0, batchAny)}, err: boom,
			verdict: failed, retry: 2, delay: time.Minute, iso: []isolation{batchAny, batchAny}},
		{name: "second failure splits by row", batch: []*entry{ev("a", 1, batchAny), ev("b", 1, batchAny)}, err: boom,
			verdict: failed, retry: 2, delay: 2 * time.Minute, iso: []isolation{batchRow, batchRow}},
		{name: "one row's batch splits into single events", batch: []*entry{ev("a", 1, batchRow), ev("a", 1, batchRow)}, err: boom,
			verdict: failed, retry: 2, delay: 2 * time.Minute, iso: []isolation{batchOne, batchOne}},
		{name: "an event in a batch is never parked", batch: []*entry{ev("a", 5, batchRow), ev("b", 5, batchRow)}, err: boom,
			verdict: failed, retry: 2, delay: 6 * time.Minute, iso: []isolation{batchRow, batchRow}},
		{name: "alone, parked after max attempts", batch: []*entry{ev("a", 2, batchOne)}, err: boom,
			verdict: failed, park: 1, delay: 3 * time.Minute, iso: []isolation{batchOne}},
		{name: "alone, retried below max attempts", batch: []*entry{ev("a", 1, batchOne)}, err: boom,
			verdict: failed, retry: 1, delay: 2 * time.Minute, iso: []isolation{batchOne}},
		{name: "permanent parks at once when alone", batch: []*entry{ev("a", 0, batchAny)}, err: attempt.Permanent(boom),
			verdict: failed, park: 1, delay: time.Minute, iso: []isolation{batchAny}},
		{name: "permanent in a batch isolates within a second", batch: []*entry{ev("a", 3, batchAny), ev("b", 3, batchAny)}, err: attempt.Permanent(boom),
			verdict: failed, retry: 2, delay: time.Second, iso: []isolation{batchRow, batchRow}},
		{name: "nowhere to park: retried for ever", batch: []*entry{ev("a", 9, batchOne)}, err: attempt.Permanent(boom),
			pol: policy{maxAttempts: 3, backoff: pol.backoff}, verdict: failed, retry: 1, delay: 10 * time.Minute, iso: []isolation{batchOne}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pol
			if tt.pol.backoff != nil {
				p = tt.pol
			}
			before := make([]int, len(tt.batch))
			for i, e := range tt.batch {
				before[i] = e.attempts
			}
			d := decide(tt.batch, tt.err, p, now)
			if d.verdict != tt.verdict || len(d.retry) != tt.retry || len(d.park) != tt.park || d.delay != tt.delay {
				t.Fatalf("decide = verdict %d, %d retried, %d parked, delay %s; want %d, %d, %d, %s",
					d.verdict, len(d.retry), len(d.park), d.delay, tt.verdict, tt.retry, tt.park, tt.delay)
			}
			for i, e := range tt.batch {
				counted := tt.verdict == failed
				if want := before[i] + map[bool]int{true: 1}[counted]; e.attempts != want {
					t.Errorf("event %d: %d attempts, want %d", i, e.attempts, want)
				}
				if tt.iso != nil && e.isolation != tt.iso[i] {
					t.Errorf("event %d: isolation %d, want %d", i, e.isolation, tt.iso[i])
				}
			}
			for _, e := range d.retry {
				if !e.notBefore.Equal(now.Add(d.delay)) || e.lastErr == "" || !e.firstFail.Equal(now) {
					t.Errorf("retried event: notBefore %v, lastErr %q, firstFail %v", e.notBefore, e.lastErr, e.firstFail)
				}
			}
		})
	}
}
