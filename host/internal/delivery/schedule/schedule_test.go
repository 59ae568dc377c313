package schedule

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/host/internal/delivery/fanout"
	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/pluginkit"
)

// fakeSink records deliveries and checks the row invariant: a row is never
// in flight twice at once.
type fakeSink struct {
	t        *testing.T
	mu       sync.Mutex
	inFlight map[string]bool
	got      []pluginkit.Event
	attempts int
	// behave decides the outcome of one attempt (nil: success).
	behave func(ctx context.Context, n int, evs []pluginkit.Event) error
	// seen, when set, is shown every batch as it arrives.
	seen    func(b attempt.Batch)
	latency func() time.Duration
}

func (f *fakeSink) Deliver(ctx context.Context, b attempt.Batch) (attempt.Result, error) {
	evs := b.Events
	if f.seen != nil {
		f.seen(b)
	}
	f.mu.Lock()
	f.attempts++
	n := f.attempts
	rows := map[string]bool{}
	for _, e := range evs {
		r := rowKey(e)
		if !rows[r] && f.inFlight[r] {
			f.t.Errorf("row %q in flight twice", r)
		}
		rows[r] = true
	}
	for r := range rows {
		f.inFlight[r] = true
	}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		for r := range rows {
			delete(f.inFlight, r)
		}
		f.mu.Unlock()
	}()
	if f.latency != nil {
		time.Sleep(f.latency())
	}
	if f.behave != nil {
		if err := f.behave(ctx, n, evs); err != nil {
			return attempt.Result{}, err
		}
	}
	f.mu.Lock()
	f.got = append(f.got, evs...)
	f.mu.Unlock()
	return attempt.Result{}, nil
}

func (f *fakeSink) delivered() []pluginkit.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.got)
}

// memParked is an in-memory walcast.parked.
type memParked struct {
	mu sync.Mutex
	ps []parking.Event
}

func (m *memParked) Park(_ context.Context, ps []parking.Event) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range ps {
		i := slices.IndexFunc(m.ps, func(q parking.Event) bool { return q.Event.ID == p.Event.ID })
		if i >= 0 {
			m.ps[i].Attempts += p.Attempts
			m.ps[i].LastError = p.LastError
			continue
		}
		m.ps = append(m.ps, p)
	}
	return nil
}
func (m *memParked) Unpark(_ context.Context, _ string, ids []pluginkit.EventID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ps = slices.DeleteFunc(m.ps, func(p parking.Event) bool { return slices.Contains(ids, p.Event.ID) })
	return nil
}
func (m *memParked) ParkedRows(context.Context, string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var rows []string
	for _, p := range m.ps {
		for _, r := range []string{p.Row, p.OldRow} {
			if r != "" && !slices.Contains(rows, r) {
				rows = append(rows, r)
			}
		}
	}
	return rows, nil
}
func (m *memParked) ListParked(_ context.Context, _ string, row string) ([]parking.Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []parking.Event
	for _, p := range m.ps {
		if row == "" || p.Row == row || p.OldRow == row {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b parking.Event) int { return a.Event.ID.Compare(b.Event.ID) })
	return out, nil
}
func (m *memParked) ListParkedTable(_ context.Context, _ string, schema, table string) ([]parking.Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []parking.Event
	for _, p := range m.ps {
		if p.Event.Schema == schema && p.Event.Table == table {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b parking.Event) int { return a.Event.ID.Compare(b.Event.ID) })
	return out, nil
}
func (m *memParked) ParkedRowOf(_ context.Context, _ string, id pluginkit.EventID) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.ps {
		if p.Event.ID == id {
			return p.Row, nil
		}
	}
	return "", nil
}
func (m *memParked) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.ps)
}

type harness struct {
	t       *testing.T
	tracker *ack.Tracker
	queue   *fanout.Queue
	sched   *Scheduler
	stop    chan struct{}
	done    chan error
	lsn     uint64
	last    pluginkit.EventID
}

func start(t *testing.T, cfg Config, sink Deliverer) *harness {
	t.Helper()
	h := &harness{t: t, tracker: ack.New([]ack.SinkSpec{{ID: "s", Durable: true}}, 0), queue: fanout.NewQueue(100000, true),
		stop: make(chan struct{}), done: make(chan error, 1), lsn: 0x1000}
	cfg.SinkID = "s"
	h.sched = New(cfg, h.queue, h.tracker, sink)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { h.done <- h.sched.Run(ctx, h.stop) }()
	t.Cleanup(func() {
		cancel()
		if err := <-h.done; err != nil {
			t.Error(err)
		}
	})
	return h
}

// push commits one transaction with one event per row key given.
func (h *harness) push(rows ...int) {
	h.lsn += 0x100
	for i, r := range rows {
		ev := pluginkit.Event{ID: pluginkit.EventID{CommitLSN: h.lsn, Index: uint64(i)}, Schema: "public", Table: "t",
			Op: pluginkit.OpUpdate, Key: fmt.Appendf(nil, `{"id":%d}`, r), Payload: fmt.Appendf(nil, `{"row":%d}`, r)}
		seq, err := h.tracker.Add(ev.ID)
		if err != nil {
			h.t.Fatal(err)
		}
		h.queue.C <- fanout.Item{Seq: seq, Event: ev}
		h.last = ev.ID
	}
	h.tracker.Commit(h.lsn + 8)
}

func (h *harness) waitResolved(d time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(d)
	for h.tracker.Pending(0) > 0 {
		if time.Now().After(deadline) {
			h.t.Fatalf("%d events still unresolved after %s", h.tracker.Pending(0), d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkRowOrder fails when any row's events arrived out of id order.
func checkRowOrder(t *testing.T, evs []pluginkit.Event) {
	t.Helper()
	last := map[string]pluginkit.EventID{}
	for _, e := range evs {
		r := rowKey(e)
		if p, ok := last[r]; ok && e.ID.Compare(p) <= 0 {
			t.Fatalf("row %s: %s delivered after %s", r, e.ID, p)
		}
		last[r] = e.ID
	}
}

func TestRowLanesKeepPerRowOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	lat := rand.New(rand.NewPCG(5, 6))
	var mu sync.Mutex
	sink := &fakeSink{t: t, inFlight: map[string]bool{}, latency: func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return time.Duration(lat.IntN(3000)) * time.Microsecond
	}}
	h := start(t, Config{BatchSize: 10, MaxInFlight: 8, RetryBase: time.Millisecond}, sink)
	for tx := 0; tx < 400; tx++ {
		rows := make([]int, 1+r.IntN(10))
		for i := range rows {
			rows[i] = r.IntN(30) // few rows: many conflicts
		}
		h.push(rows...)
	}
	h.waitResolved(30 * time.Second)
	got := sink.delivered()
	checkRowOrder(t, got)
	if wm, _ := h.tracker.PositionsToSave(); wm[0] != h.last {
		t.Fatalf("watermark %s, want %s", wm[0], h.last)
	}
}

func TestFailingRowIsIsolatedAndParked(t *testing.T) {
	bad := []byte(`{"id":13}`)
	sink := &fakeSink{t: t, inFlight: map[string]bool{}, behave: func(_ context.Context, _ int, evs []pluginkit.Event) error {
		for _, e := range evs {
			if string(e.Key) == string(bad) {
				return errors.New("receiver rejects row 13")
			}
		}
		return nil
	}}
	store := &memParked{}
	h := start(t, Config{BatchSize: 50, MaxInFlight: 4, RetryBase: time.Millisecond, MaxAttempts: 3, Parked: store}, sink)
	for tx := 0; tx < 20; tx++ {
		h.push(tx%5, 13, 100+tx) // row 13 changes in every transaction
	}
	h.waitResolved(30 * time.Second)
	got := sink.delivered()
	checkRowOrder(t, got)
	for _, e := range got {
		if string(e.Key) == string(bad) {
			t.Fatalf("event of the failing row was delivered: %s", e.ID)
		}
	}
	if len(got) != 40 {
		t.Fatalf("delivered %d events of healthy rows, want 40", len(got))
	}
	parked, _ := store.ListParked(context.Background(), "s", "")
	if len(parked) != 20 {
		t.Fatalf("%d events parked, want the 20 of row 13", len(parked))
	}
	if parked[0].Attempts < 3 {
		t.Fatalf("first parked event has %d attempts, want at least max_attempts 3", parked[0].Attempts)
	}

	// Replay with the receiver healthy: row 13's history in order, then
	// its later live events flow normally.
	bad = []byte("none")
	if err := h.sched.Replay(context.Background(), parking.ReplayRequest{Sink: "s"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for store.len() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d events still parked after replay", store.len())
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.push(13)
	h.waitResolved(10 * time.Second)
	got = sink.delivered()
	checkRowOrder(t, got)
	if n := len(got); n != 61 {
		t.Fatalf("delivered %d events after replay, want 61", n)
	}
	if last := got[len(got)-1]; last.ID != h.last {
		t.Fatalf("the live event after the replay arrived as %s, not last", last.ID)
	}
}

func TestThrottleIsNotAnAttempt(t *testing.T) {
	var times []time.Time
	sink := &fakeSink{t: t, inFlight: map[string]bool{}, behave: func(_ context.Context, n int, _ []pluginkit.Event) error {
		times = append(times, time.Now())
		if n <= 3 {
			return attempt.Throttled(150*time.Millisecond, errors.New("429"))
		}
		return nil
	}}
	store := &memParked{}
	// A floor below the pause asked for, so that the pauses are the 150 ms.
	h := start(t, Config{BatchSize: 10, MaxInFlight: 1, RetryBase: time.Hour, MaxAttempts: 1, Parked: store, ThrottleMin: 10 * time.Millisecond}, sink)
	h.push(1)
	h.waitResolved(10 * time.Second)
	if store.len() != 0 {
		t.Fatal("a throttled event was parked: throttles must not count as attempts")
	}
	for i := 1; i < len(times); i++ {
		if gap := times[i].Sub(times[i-1]); gap < 140*time.Millisecond {
			t.Fatalf("attempt %d came %s after a throttle of 150ms", i+1, gap)
		}
	}
	if a := h.sched.Stats.Attempts.Load(); a != 1 {
		t.Fatalf("attempts = %d, want 1 (throttles are not attempts)", a)
	}
}

func TestDeliverTimeoutRetries(t *testing.T) {
	sink := &fakeSink{t: t, inFlight: map[string]bool{}, behave: func(ctx context.Context, n int, _ []pluginkit.Event) error {
		if n == 1 {
			<-ctx.Done() // hang until the host gives up
			return ctx.Err()
		}
		return nil
	}}
	h := start(t, Config{BatchSize: 10, RetryBase: 10 * time.Millisecond, DeliverTimeout: 100 * time.Millisecond}, sink)
	h.push(1, 2)
	h.waitResolved(10 * time.Second)
	if len(sink.delivered()) != 2 || h.sched.Stats.Failures.Load() != 1 {
		t.Fatalf("delivered %d, failures %d", len(sink.delivered()), h.sched.Stats.Failures.Load())
	}
}

// The limiter's bucket starts empty when the scheduler is made, so from
// that moment on no more than RateLimit events per second go out: 1,000
// events at 500/s take 2 s. Without a limiter they take milliseconds.
// TestRateLimit checks the scheduler's use of the bucket with real time,
// through bounds that a slow machine can only make easier to meet:
//
//   - from an empty bucket, no more than rate*(b-start) events by any
//     arrival b (an event arrives after it was dispatched, never before);
//   - with one batch in flight at a time, batch k+1 is dispatched only
//     after batch k arrived, so the batches after the one arriving at a,
//     up to the one arriving at b, were all dispatched inside [a, b]:
//     at most burst + rate*(b-a) events. The batch arriving at a is left
//     out of the count because it may have been dispatched before a; that
//     is the slack, and it is one batch, not a guess at scheduling delay.
//
// The sink idles for three seconds between two loads, so that a bucket
// holding more than one second's worth would show it as a larger burst.
// The lower bound only catches a limiter that starves the sink: every
// event is delivered, and the first load (which only refill paces) runs
// at a quarter of the limit at least, room enough for a loaded 2-core CI
// machine; how close to the limit it gets is a benchmark's business.
func TestRateLimit(t *testing.T) {
	const rate, burst = 500.0, 500.0
	type arrival struct {
		at time.Time
		n  int
	}
	var mu sync.Mutex
	var arrivals []arrival
	sink := &fakeSink{t: t, inFlight: map[string]bool{}, behave: func(_ context.Context, _ int, evs []pluginkit.Event) error {
		mu.Lock()
		arrivals = append(arrivals, arrival{time.Now(), len(evs)})
		mu.Unlock()
		return nil
	}}
	begin := time.Now()
	h := start(t, Config{BatchSize: 100, MaxInFlight: 1, RateLimit: rate}, sink)
	load := func(events int) {
		for i := 0; i < events/10; i++ {
			h.push(i*10, i*10+1, i*10+2, i*10+3, i*10+4, i*10+5, i*10+6, i*10+7, i*10+8, i*10+9)
		}
		h.waitResolved(time.Minute)
	}
	load(500)
	first := time.Since(begin)
	if r := 500 / first.Seconds(); r < rate/4 {
		t.Fatalf("500 events took %s (%.0f/s): the limiter starves a sink limited to %.0f/s", first, r, rate)
	}
	mu.Lock()
	idleFrom := arrivals[len(arrivals)-1].at
	mu.Unlock()
	for time.Since(idleFrom) < 3*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	load(1000)
	if got := len(sink.delivered()); got != 1500 {
		t.Fatalf("delivered %d events, want 1500", got)
	}
	mu.Lock()
	defer mu.Unlock()
	const eps = 1e-6
	total := 0
	for j, b := range arrivals {
		total += b.n
		if lim := rate * b.at.Sub(begin).Seconds(); float64(total) > lim+eps {
			t.Fatalf("%d events delivered %s after start, more than rate*(b-start) = %.1f", total, b.at.Sub(begin), lim)
		}
		sum := 0
		for i := j - 1; i >= 0; i-- {
			sum += arrivals[i+1].n
			if lim := burst + rate*b.at.Sub(arrivals[i].at).Seconds(); float64(sum) > lim+eps {
				t.Fatalf("%d events dispatched in [%s, %s] after start, more than burst + rate*(b-a) = %.1f",
					sum, arrivals[i].at.Sub(begin), b.at.Sub(begin), lim)
			}
		}
	}
	t.Logf("500 events in %s from an empty bucket, then 1000 more after a 3 s idle; %d requests in all", first, len(arrivals))
}

func TestPermanentErrorParksAtOnceWhenAlone(t *testing.T) {
	sink := &fakeSink{t: t, inFlight: map[string]bool{}, behave: func(_ context.Context, _ int, evs []pluginkit.Event) error {
		for _, e := range evs {
			if string(e.Key) == `{"id":2}` {
				return attempt.Permanent(errors.New("schema rejected"))
			}
		}
		return nil
	}}
	store := &memParked{}
	h := start(t, Config{BatchSize: 10, RetryBase: time.Hour, MaxAttempts: 5, Parked: store}, sink)
	h.push(1, 2, 3)
	h.waitResolved(10 * time.Second)
	if store.len() != 1 || len(sink.delivered()) != 2 {
		t.Fatalf("parked %d, delivered %d", store.len(), len(sink.delivered()))
	}
}

func TestFatalStopsInsteadOfParking(t *testing.T) {
	sink := &fakeSink{t: t, inFlight: map[string]bool{}, behave: func(context.Context, int, []pluginkit.Event) error {
		return attempt.Fatal(errors.New("fenced"))
	}}
	store := &memParked{}
	tracker := ack.New([]ack.SinkSpec{{ID: "s", Durable: true}}, 0)
	queue := fanout.NewQueue(10, true)
	s := New(Config{SinkID: "s", MaxAttempts: 1, Parked: store}, queue, tracker, sink)
	seq, _ := tracker.Add(pluginkit.EventID{CommitLSN: 1, Index: 0})
	queue.C <- fanout.Item{Seq: seq, Event: pluginkit.Event{ID: pluginkit.EventID{CommitLSN: 1}, Schema: "public", Table: "t", Key: []byte("1")}}
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background(), make(chan struct{})) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "fenced") {
			t.Fatalf("Run returned %v, want the fatal error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a fatal sink error did not stop the scheduler")
	}
	if store.len() != 0 || tracker.Pending(0) != 1 {
		t.Fatalf("parked %d, pending %d: a fatal error must leave the event unresolved, not parked", store.len(), tracker.Pending(0))
	}
}

func TestFirstRetryKeepsTheBatchWhole(t *testing.T) {
	// The scheduler may cut the first batch before all ten events are queued,
	// so the test follows whatever the first (failed) batch held: its first
	// retry must carry exactly those events again, in one request.
	var mu sync.Mutex
	var attempts [][]string
	sink := &fakeSink{t: t, inFlight: map[string]bool{}, behave: func(_ context.Context, n int, evs []pluginkit.Event) error {
		ids := make([]string, len(evs))
		for i, e := range evs {
			ids[i] = e.ID.String()
		}
		mu.Lock()
		attempts = append(attempts, ids)
		mu.Unlock()
		if n == 1 {
			return errors.New("transient")
		}
		return nil
	}}
	h := start(t, Config{BatchSize: 10, MaxInFlight: 1, RetryBase: 50 * time.Millisecond}, sink)
	h.push(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	h.waitResolved(10 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	failed := strings.Join(attempts[0], ",")
	for _, a := range attempts[1:] {
		if slices.Contains(a, attempts[0][0]) {
			if got := strings.Join(a, ","); got != failed {
				t.Fatalf("failed batch [%s] was retried as [%s], want it whole (attempts %v)", failed, got, attempts)
			}
			return
		}
	}
	t.Fatalf("failed batch [%s] never retried (attempts %v)", failed, attempts)
}

// A gap flag (events dropped for a non-durable sink) reaches the plugin
// with the batch of the flagged event, also when the flagged event itself
// is filtered out, and only once.
func TestGapBeforeReachesTheSink(t *testing.T) {
	var mu sync.Mutex
	var gaps []bool
	var firsts []string
	sink := &fakeSink{t: t, inFlight: map[string]bool{}, seen: func(b attempt.Batch) {
		mu.Lock()
		gaps = append(gaps, b.GapBefore)
		firsts = append(firsts, b.Events[0].ID.String())
		mu.Unlock()
	}}
	tracker := ack.New([]ack.SinkSpec{{ID: "s"}}, 0)
	queue := fanout.NewQueue(100, false)
	s := New(Config{SinkID: "s", BatchSize: 1, Strict: true, Tables: map[string]bool{"public.t": true}}, queue, tracker, sink)
	push := func(table string, idx uint64, gap bool) {
		ev := pluginkit.Event{ID: pluginkit.EventID{CommitLSN: 0x100, Index: idx}, Schema: "public", Table: table, Op: pluginkit.OpInsert, Key: []byte("1")}
		seq, _ := tracker.Add(ev.ID)
		queue.C <- fanout.Item{Seq: seq, Event: ev, GapBefore: gap}
	}
	push("t", 0, false)
	push("other", 1, true) // filtered: its flag moves to event 2
	push("t", 2, false)
	push("t", 3, false)
	tracker.Commit(0x108)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, make(chan struct{})) }()
	deadline := time.Now().Add(10 * time.Second)
	for tracker.Pending(0) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	want := []bool{false, true, false}
	if !slices.Equal(gaps, want) {
		t.Fatalf("batches %v carried gap flags %v, want %v", firsts, gaps, want)
	}
}

// The scheduler takes from its queue only while it holds fewer than
// 4 × MaxBatchBytes of payload: large rows cannot fill its window of
// events with gigabytes.
func TestHeldBytesAreBounded(t *testing.T) {
	release := make(chan struct{})
	sink := &fakeSink{t: t, inFlight: map[string]bool{}, behave: func(ctx context.Context, _ int, _ []pluginkit.Event) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	h := start(t, Config{BatchSize: 10, MaxInFlight: 2, MaxBatchBytes: 100 << 10}, sink) // 400 KiB held at most
	payload := make([]byte, 50<<10)
	h.lsn += 0x100
	for i := range 200 { // 10 MB
		ev := pluginkit.Event{ID: pluginkit.EventID{CommitLSN: h.lsn, Index: uint64(i)}, Schema: "public", Table: "t",
			Op: pluginkit.OpInsert, Key: fmt.Appendf(nil, `{"id":%d}`, i), Payload: payload}
		seq, _ := h.tracker.Add(ev.ID)
		h.queue.C <- fanout.Item{Seq: seq, Event: ev}
	}
	h.tracker.Commit(h.lsn + 8)
	time.Sleep(300 * time.Millisecond)
	held := h.sched.Stats.Held.Load()
	if held == 0 || held*int64(len(payload)) > 400<<10+int64(len(payload)) {
		t.Fatalf("scheduler holds %d events of 50 KiB, want at most 400 KiB worth (and some)", held)
	}
	close(release)
	h.waitResolved(30 * time.Second)
}

// checkpointSink behaves like the Kafka sink: events at or below what it
// committed are reported as duplicates and not written, unless the batch is
// a replay and honourReplay is set.
type checkpointSink struct {
	mu           sync.Mutex
	honourReplay bool
	fail         func(ev pluginkit.Event) bool
	checkpoint   pluginkit.EventID
	written      []pluginkit.Event
	batches      [][]pluginkit.Event
	replays      []bool
}

func (c *checkpointSink) Deliver(ctx context.Context, b attempt.Batch) (attempt.Result, error) {
	evs := b.Events
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batches = append(c.batches, slices.Clone(evs))
	c.replays = append(c.replays, b.Replay)
	for _, e := range evs {
		if c.fail != nil && c.fail(e) {
			return attempt.Result{}, attempt.Permanent(errors.New("rejected"))
		}
	}
	var res attempt.Result
	for _, e := range evs {
		if e.ID.Compare(c.checkpoint) <= 0 && !(c.honourReplay && b.Replay) {
			res.Duplicates++
			continue
		}
		c.written = append(c.written, e)
		if e.ID.Compare(c.checkpoint) > 0 {
			c.checkpoint = e.ID
		}
	}
	return res, nil
}

func (c *checkpointSink) writtenKeys() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, e := range c.written {
		out = append(out, string(e.Key))
	}
	return out
}

func waitParked(t *testing.T, store *memParked, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for store.len() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d events parked, want %d", store.len(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A parked event lies below the sink's checkpoint once later events were
// delivered. Replayed, it goes out in batches flagged as a replay (never
// mixed with live events), a sink honouring the flag writes it, and a sink
// that reports it as a duplicate does not get it unparked.
func TestReplayIsFlaggedAndNeverUnparksADuplicate(t *testing.T) {
	for _, honour := range []bool{true, false} {
		t.Run(fmt.Sprintf("honour=%v", honour), func(t *testing.T) {
			var reject sync.Map
			reject.Store(`{"id":1}`, true)
			sink := &checkpointSink{honourReplay: honour, fail: func(e pluginkit.Event) bool {
				_, bad := reject.Load(string(e.Key))
				return bad
			}}
			store := &memParked{}
			// Strict, as the daemon runs a sink that asks for order
			// (pluginkit.Info.Ordered): filtering at a checkpoint needs it.
			h := start(t, Config{BatchSize: 10, Strict: true, RetryBase: time.Millisecond, MaxAttempts: 2, Parked: store}, sink)
			h.push(1, 2, 3)
			h.push(1, 2, 3)
			h.waitResolved(10 * time.Second)
			waitParked(t, store, 2)
			reject.Delete(`{"id":1}`)
			parked := map[pluginkit.EventID]bool{}
			ps, _ := store.ListParked(context.Background(), "s", "")
			for _, p := range ps {
				parked[p.Event.ID] = true
			}
			sink.mu.Lock()
			replayFrom := len(sink.batches)
			sink.mu.Unlock()
			if err := h.sched.Replay(context.Background(), parking.ReplayRequest{Sink: "s"}); err != nil {
				t.Fatal(err)
			}
			h.push(4, 5) // live events while the replay runs
			h.waitResolved(10 * time.Second)
			if honour {
				waitParked(t, store, 0)
				if got := sink.writtenKeys(); len(got) != 8 {
					t.Fatalf("written %v, want 8 events", got)
				}
			} else {
				// Wait until the replay ended: the events are back in
				// walcast.parked saying why, or (the bug) gone.
				deadline := time.Now().Add(10 * time.Second)
				for {
					ps, _ := store.ListParked(context.Background(), "s", "")
					if len(ps) == 0 {
						t.Fatal("replayed events the sink called duplicates (and did not write) were unparked")
					}
					if strings.Contains(ps[0].LastError, "already delivered") {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("after the replay the events are parked with error %q, want it to say the sink called them duplicates", ps[0].LastError)
					}
					time.Sleep(5 * time.Millisecond)
				}
				waitParked(t, store, 2)
				if got := sink.writtenKeys(); slices.Contains(got[4:], `{"id":1}`) {
					t.Fatalf("written %v", got)
				}
			}
			sink.mu.Lock()
			defer sink.mu.Unlock()
			for i, b := range sink.batches[replayFrom:] {
				i += replayFrom
				replayed := 0
				for _, e := range b {
					if parked[e.ID] {
						replayed++
					}
				}
				if sink.replays[i] != (replayed > 0) || (replayed > 0 && replayed != len(b)) {
					t.Fatalf("batch %d (replay flag %v) mixes or mislabels events: %v", i, sink.replays[i], b)
				}
			}
		})
	}
}

// pushEvent commits one transaction with one event; oldKey, when set, makes
// it an update that changed the row's key.
func (h *harness) pushEvent(key, oldKey string) pluginkit.EventID {
	h.lsn += 0x100
	ev := pluginkit.Event{ID: pluginkit.EventID{CommitLSN: h.lsn}, Schema: "public", Table: "t",
		Op: pluginkit.OpUpdate, Key: []byte(key), Payload: []byte(key)}
	var old []byte
	if oldKey != "" {
		old = []byte(oldKey)
	}
	seq, err := h.tracker.Add(ev.ID)
	if err != nil {
		h.t.Fatal(err)
	}
	h.queue.C <- fanout.Item{Seq: seq, Event: ev, OldKey: old}
	h.last = ev.ID
	h.tracker.Commit(h.lsn + 8)
	return ev.ID
}

// An update that moves a row from key a to key b while an event of a is
// parked waits behind it: it is parked under both keys, so later events of
// b wait too, and a replay delivers all of them in commit order.
func TestKeyChangeWaitsForParkedOldKey(t *testing.T) {
	var reject atomic.Bool
	reject.Store(true)
	sink := &fakeSink{t: t, inFlight: map[string]bool{}, behave: func(_ context.Context, _ int, evs []pluginkit.Event) error {
		for _, e := range evs {
			if reject.Load() && string(e.Key) == `{"id":"a"}` {
				return attempt.Permanent(errors.New("rejected"))
			}
		}
		return nil
	}}
	store := &memParked{}
	h := start(t, Config{BatchSize: 10, MaxInFlight: 4, RetryBase: time.Millisecond, MaxAttempts: 1, Parked: store}, sink)
	first := h.pushEvent(`{"id":"a"}`, "")
	h.waitResolved(10 * time.Second)
	waitParked(t, store, 1)
	move := h.pushEvent(`{"id":"b"}`, `{"id":"a"}`)
	after := h.pushEvent(`{"id":"b"}`, "")
	other := h.pushEvent(`{"id":"c"}`, "")
	h.waitResolved(10 * time.Second)
	if got := sink.delivered(); len(got) != 1 || got[0].ID != other {
		t.Fatalf("delivered %v; want only the unrelated row's event, the key change waiting behind the parked old key", got)
	}
	ps, _ := store.ListParked(context.Background(), "s", "")
	if len(ps) != 3 || ps[1].Event.ID != move || ps[1].OldRow != rowOf(ps[1].Event, []byte(`{"id":"a"}`)) {
		t.Fatalf("parked %+v; want the key change parked under both keys", ps)
	}
	// Replaying the old key's row brings the new key's row along: the key
	// change belongs to both.
	reject.Store(false)
	if err := h.sched.Replay(context.Background(), parking.ReplayRequest{Sink: "s", ID: first}); err != nil {
		t.Fatal(err)
	}
	waitParked(t, store, 0)
	next := h.pushEvent(`{"id":"b"}`, "")
	h.waitResolved(10 * time.Second)
	var ids []pluginkit.EventID
	for _, e := range sink.delivered()[1:] {
		ids = append(ids, e.ID)
	}
	if want := []pluginkit.EventID{first, move, after, next}; !slices.Equal(ids, want) {
		t.Fatalf("after the replay delivered %v, want %v", ids, want)
	}
}

// walcast_sink_delivery_attempts_total is a counter: read while a throttled
// call is in flight and after it, it never goes down.
func TestAttemptsNeverGoDown(t *testing.T) {
	entered := make(chan struct{}, 4)
	release := make(chan struct{})
	sink := &fakeSink{t: t, inFlight: map[string]bool{}, behave: func(_ context.Context, n int, _ []pluginkit.Event) error {
		if n == 1 {
			entered <- struct{}{}
			<-release
			return attempt.Throttled(10*time.Millisecond, errors.New("429"))
		}
		return nil
	}}
	h := start(t, Config{BatchSize: 10, MaxInFlight: 1, ThrottleMin: 10 * time.Millisecond}, sink)
	h.push(1)
	<-entered
	during := h.sched.Stats.Attempts.Load()
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for h.sched.Stats.Throttles.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	afterThrottle := h.sched.Stats.Attempts.Load()
	h.waitResolved(10 * time.Second)
	end := h.sched.Stats.Attempts.Load()
	if afterThrottle < during || end < afterThrottle || end != 1 {
		t.Fatalf("attempts read %d during the throttled call, %d after it, %d after the delivery; want a counter that never goes down and ends at 1",
			during, afterThrottle, end)
	}
}

// ReplayParked (the daemon-less walcast replay) replays through the same
// scheduler: batched, rate limited, flagged as a replay, in row order.
func TestReplayParkedBatchesAndLimits(t *testing.T) {
	store := &memParked{}
	var ps []parking.Event
	for i := range 40 {
		ev := pluginkit.Event{ID: pluginkit.EventID{CommitLSN: 0x100, Index: uint64(i)}, Schema: "public", Table: "t", Op: pluginkit.OpUpdate,
			Key: fmt.Appendf(nil, `{"id":%d}`, i%4), Payload: []byte("{}")}
		ps = append(ps, parking.Event{Sink: "s", Event: ev, Row: rowKey(ev), Attempts: 3, LastError: "x"})
	}
	for _, rate := range []float64{0, 20} {
		store.Park(context.Background(), ps)
		sink := &checkpointSink{honourReplay: true, checkpoint: pluginkit.EventID{CommitLSN: 0x200}}
		begin := time.Now()
		n, err := ReplayParked(context.Background(), Config{SinkID: "s", BatchSize: 10, MaxInFlight: 2, RateLimit: rate, Parked: store}, sink,
			parking.ReplayRequest{Sink: "s"})
		took := time.Since(begin)
		if err != nil || n != 40 || store.len() != 0 {
			t.Fatalf("rate %v: replayed %d (%v), %d still parked", rate, n, err, store.len())
		}
		sink.mu.Lock()
		checkRowOrder(t, sink.written)
		if slices.Contains(sink.replays, false) {
			t.Fatalf("rate %v: a replayed batch was not flagged as a replay", rate)
		}
		batches := len(sink.batches)
		sink.mu.Unlock()
		if rate == 0 && batches > 8 {
			t.Fatalf("40 events of 4 rows replayed in %d batches: want them batched (batch_size 10)", batches)
		}
		// 40 events at 20/s from an empty bucket: about 2 s.
		if rate > 0 && took < 1800*time.Millisecond {
			t.Fatalf("40 events at rate_limit 20 replayed in %s: the rate limit was ignored", took)
		}
	}
}

// A sink with large batches and many lanes holds at most maxLookAhead
// events (pending plus in flight), still with several batches in flight: (lanes+1) × 1000 events was most of the webhook sink's memory.
func TestLookAheadIsBoundedForLargeBatches(t *testing.T) {
	release := make(chan struct{})
	sink := &fakeSink{t: t, inFlight: map[string]bool{}, behave: func(ctx context.Context, _ int, _ []pluginkit.Event) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}
	h := start(t, Config{BatchSize: 1000, MaxInFlight: 8}, sink)
	rows := make([]int, 12000)
	for i := range rows {
		rows[i] = i
	}
	h.push(rows...)
	deadline := time.Now().Add(30 * time.Second)
	for h.sched.Stats.InFlight.Load() < 3 || h.sched.Stats.Held.Load() < maxLookAhead-1000 {
		if time.Now().After(deadline) {
			t.Fatalf("scheduler holds %d events, %d batches in flight: want several full batches", h.sched.Stats.Held.Load(), h.sched.Stats.InFlight.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // it must not take more meanwhile
	if held := h.sched.Stats.Held.Load(); held > maxLookAhead {
		t.Fatalf("scheduler holds %d events, want at most %d", held, maxLookAhead)
	}
	close(release)
	h.waitResolved(30 * time.Second)
	if got := lookAhead(8, 100); got != 1024 {
		t.Errorf("lookAhead(8 lanes, 100) = %d, want 1024 as before", got)
	}
	if got := lookAhead(1, 10000); got != 20000 {
		t.Errorf("lookAhead(1 lane, 10000) = %d, want two full batches", got)
	}
}
