package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The latency curve (issue 33, goal 3): for each sink and each rate, a
// fresh slot and daemon, writers committing 10-row transactions at the
// rate for LatencyDuration, and each change's commit time (the envelope's
// commit_time) → its arrival: at the webhook receiver, or at a
// read_committed Kafka consumer once the sink's transaction committed.
//
// A rate is sustained when (1) the writers committed at least 95% of it
// (they share the cores: at a rate the machine cannot even write, the
// sink is not what failed), (2) every change arrived within a minute of
// the writers stopping, and (3) latency did not grow: the median latency
// of the changes committed in the last third of the window is at most
// twice that of the first third plus 10 ms. A path that falls behind
// builds a backlog that every later change waits behind, so its latency
// rises with time; one that keeps up has the same latency at the end as at
// the start.

// Latency sinks.
const (
	LatencyWebhook = "webhook"
	LatencyKafka   = "kafka" // eos = true, into walcast-kfake
)

// Latency is one rate through one sink.
type Latency struct {
	Sink     string  `json:"sink"`
	Rate     int     `json:"rate_changes_per_sec"`
	Achieved float64 `json:"written_changes_per_sec"`
	Seconds  float64 `json:"seconds"`
	Written  int     `json:"written"`
	Events   int     `json:"events"`
	P50ms    float64 `json:"p50_ms"`
	P99ms    float64 `json:"p99_ms"`
	Maxms    float64 `json:"max_ms"`
	// FirstP50ms and LastP50ms are the median latencies of the changes
	// committed in the first and the last third of the window.
	FirstP50ms float64 `json:"first_third_p50_ms"`
	LastP50ms  float64 `json:"last_third_p50_ms"`
	Sustained  bool    `json:"sustained"`
	Why        string  `json:"not_sustained_because,omitempty"`
}

// arrivals is where a latency run's changes arrive.
type arrivals interface {
	count() int64
	arrived() (commit []time.Time, lat []time.Duration)
	close()
}

const latencyTxRows = 10

// latencyCurve runs every sink at every rate, in the order given.
func (e *env) latencyCurve(ctx context.Context) ([]Latency, error) {
	var out []Latency
	base := int64(e.cfg.Inserts + 10_000_000)
	for _, sink := range e.cfg.LatencySinks {
		for _, rate := range e.cfg.LatencyRates {
			e.logf("latency through %s at %d changes/s for %s", sink, rate, e.cfg.LatencyDuration)
			l, err := e.latencyAt(ctx, sink, rate, base)
			if err != nil {
				return out, fmt.Errorf("%s at %d/s: %w", sink, rate, err)
			}
			e.logf("  written at %.0f/s, p50 %.1f ms, p99 %.1f ms, max %.1f ms, sustained %v %s", l.Achieved, l.P50ms, l.P99ms, l.Maxms, l.Sustained, l.Why)
			out = append(out, l)
			base += int64(l.Written) + latencyTxRows
		}
	}
	return out, nil
}

// latencyAt measures one sink at one rate; ids from base up are free.
func (e *env) latencyAt(ctx context.Context, sink string, rate int, base int64) (Latency, error) {
	l := Latency{Sink: sink, Rate: rate}
	name := fmt.Sprintf("latency_%s_%d", sink, rate)
	slot := "b_" + name
	if err := e.createSlot(ctx, slot); err != nil {
		return l, err
	}
	defer e.dropSlot(context.Background(), slot)
	poll, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return l, err
	}
	defer poll.Close(context.Background())
	d := daemonRun{name: name, slot: slot}
	to, err := e.latencyTarget(ctx, sink, &d)
	if err != nil {
		return l, err
	}
	defer to.close()
	p, err := e.startDaemon(ctx, d)
	if err != nil {
		return l, err
	}
	defer p.kill()
	if _, err := e.waitActive(ctx, poll, slot, p.exited); err != nil {
		return l, fmt.Errorf("walcast: %w\n%s", err, e.tailLog(d.name))
	}
	// One change through first, so that the window does not include the
	// sink's start (topic creation, the consumer finding it).
	if _, err := e.conn.Exec(ctx, insertSQL, base, base); err != nil {
		return l, err
	}
	if err := waitCount(to, 1, p.exited, time.Minute); err != nil {
		return l, fmt.Errorf("warm-up change: %w\n%s", err, e.tailLog(d.name))
	}
	w, err := e.writeAtRate(ctx, rate, base+1)
	if err != nil {
		return l, err
	}
	arrivedAll := waitCount(to, int64(1+w.rows), p.exited, time.Minute)
	if err := e.stopDaemon(p); err != nil {
		return l, err
	}
	l.Written, l.Seconds = w.rows, w.last.Sub(w.first).Seconds()
	l.Achieved = float64(w.rows) / l.Seconds
	commit, lat := to.arrived()
	l.summarise(commit, lat, w.first, w.last)
	l.judge(arrivedAll)
	return l, nil
}

// latencyTarget starts what sink delivers to and fills in d's sink block.
func (e *env) latencyTarget(ctx context.Context, sink string, d *daemonRun) (arrivals, error) {
	switch sink {
	case LatencyWebhook:
		rcv, err := startReceiver(true)
		if err != nil {
			return nil, err
		}
		d.sink = fmt.Sprintf("sink \"webhook\" \"hook\" {\n  config {\n    url = %q\n  }\n}", rcv.url)
		return rcv, nil
	case LatencyKafka:
		addr, stop, err := e.startKfake(ctx)
		if err != nil {
			return nil, err
		}
		d.sink = fmt.Sprintf("sink \"kafka\" \"kafka\" {\n  config {\n    brokers          = [%q]\n    eos              = true\n    transactional_id = \"bench-%s\"\n  }\n}", addr, d.name)
		k, err := startKafkaReader(addr)
		if err != nil {
			stop()
			return nil, err
		}
		return kafkaTarget{k, stop}, nil
	}
	return nil, fmt.Errorf("unknown latency sink %q (known: %s, %s)", sink, LatencyWebhook, LatencyKafka)
}

// kafkaTarget is the consumer and the kfake it reads from.
type kafkaTarget struct {
	*kafkaReader
	stopKfake func()
}

func (k kafkaTarget) close() {
	k.kafkaReader.close()
	k.stopKfake()
}

// waitCount returns when to has counted n changes.
func waitCount(to arrivals, n int64, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for to.count() < n {
		select {
		case <-exited:
			return fmt.Errorf("the daemon exited after %d of %d changes arrived", to.count(), n)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d changes arrived within %s", to.count(), n, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// summarise fills in the percentiles of the changes committed in the
// window [first, last].
func (l *Latency) summarise(commit []time.Time, lat []time.Duration, first, last time.Time) {
	third := last.Sub(first) / 3
	var all, head, tail []time.Duration
	for i, c := range commit {
		// Commit times come from PostgreSQL's clock at microsecond
		// precision: allow for the rounding at the window's edges.
		if c.Before(first.Add(-time.Millisecond)) {
			continue // the warm-up change
		}
		all = append(all, lat[i])
		switch {
		case c.Before(first.Add(third)):
			head = append(head, lat[i])
		case !c.Before(last.Add(-third)):
			tail = append(tail, lat[i])
		}
	}
	l.Events = len(all)
	l.P50ms, l.P99ms, l.Maxms = quantileMs(all, 0.50), quantileMs(all, 0.99), quantileMs(all, 1)
	l.FirstP50ms, l.LastP50ms = quantileMs(head, 0.50), quantileMs(tail, 0.50)
}

// judge decides whether the rate was sustained (see the top of the file).
func (l *Latency) judge(arrivedAll error) {
	switch {
	case l.Achieved < 0.95*float64(l.Rate):
		l.Why = fmt.Sprintf("the writers reached only %.0f changes/s", l.Achieved)
	case arrivedAll != nil:
		l.Why = arrivedAll.Error()
	case l.LastP50ms > 2*l.FirstP50ms+10:
		l.Why = fmt.Sprintf("latency grew: median %.1f ms in the first third, %.1f ms in the last", l.FirstP50ms, l.LastP50ms)
	default:
		l.Sustained = true
	}
}

// written is what writeAtRate committed: rows, and when the first and the
// last transaction committed.
type written struct {
	rows        int
	first, last time.Time
}

// writeAtRate commits latencyTxRows-row inserts at rate changes/s for
// LatencyDuration from ids base up, spread over one connection per 5,000
// changes/s. Each writer commits transaction k at its start + k × its
// interval and, when late, at once (never skipping one), so a machine that
// cannot write at the rate shows as a lower written rate.
func (e *env) writeAtRate(ctx context.Context, rate int, base int64) (written, error) {
	writers := max(1, (rate+4_999)/5_000)
	every := time.Duration(float64(time.Second) * float64(writers*latencyTxRows) / float64(rate))
	perWriter := int(e.cfg.LatencyDuration / every)
	conns := make([]*pgx.Conn, writers)
	for i := range conns {
		c, err := pgx.Connect(ctx, e.dsn)
		if err != nil {
			return written{}, err
		}
		defer c.Close(context.Background())
		conns[i] = c
	}
	start := time.Now()
	var wg sync.WaitGroup
	lasts, errs := make([]time.Time, writers), make([]error, writers)
	for i, c := range conns {
		wg.Go(func() {
			for k := range perWriter {
				if wait := time.Until(start.Add(time.Duration(k) * every)); wait > 0 {
					time.Sleep(wait)
				}
				lo := base + int64((k*writers+i)*latencyTxRows)
				if _, err := c.Exec(ctx, insertSQL, lo, lo+latencyTxRows-1); err != nil {
					errs[i] = err
					return
				}
			}
			lasts[i] = time.Now()
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return written{}, fmt.Errorf("latency writer: %w", err)
		}
	}
	return written{rows: writers * perWriter * latencyTxRows, first: start, last: slices.MaxFunc(lasts, time.Time.Compare)}, nil
}
