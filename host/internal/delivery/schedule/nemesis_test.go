package schedule

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/control/schema"
	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/host/internal/delivery/fanout"
	"github.com/walcast/walcast/host/pgtest"
	"github.com/walcast/walcast/pluginkit"
)

// envInt reads an optional numeric setting of a test.
func envInt(t *testing.T, name string, def uint64) uint64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: want a whole number", name, v)
	}
	return n
}

// TestParkReplayTruncateNemesis drives the scheduler, with the real
// walcast.parked on PostgreSQL and an in-process sink that fails on
// demand, through random sequences of inserts, updates, deletes, key
// changes and single- and multi-table TRUNCATEs, interleaved with sink
// faults (refused rows, refused truncates, flaky batches), parks,
// `replay --id` and `replay --all` (waited for or not), and restarts of
// the scheduler from what walcast.parked holds. Each sequence ends with
// the sink healed and everything replayed (through the running scheduler,
// or with the daemon-less ReplayParked), and is then checked: every
// change arrived; a mirror applying what arrived, in arrival order, holds
// exactly the source's rows; per-row and per-table order held (checkOrder)
// and no truncate was in flight with another event of its table.
//
// 1,000 sequences by default, times WALCAST_CHAOS. WALCAST_NEMESIS_SEED
// sets the first sequence's seed (sequence i uses seed + i), and
// WALCAST_NEMESIS_RUNS the number of sequences, to replay a failure.
func TestParkReplayTruncateNemesis(t *testing.T) {
	pool := pgDatabase(t)
	if err := schema.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	runs := envInt(t, "WALCAST_NEMESIS_RUNS", uint64(pgtest.Chaos(t, 1000)))
	seed := envInt(t, "WALCAST_NEMESIS_SEED", uint64(time.Now().UnixNano()%1e9))
	t.Logf("%d sequences, seeds %d to %d (replay one with WALCAST_NEMESIS_SEED=<seed> WALCAST_NEMESIS_RUNS=1)", runs, seed, seed+runs-1)
	begin := time.Now()
	var next atomic.Uint64
	var mu sync.Mutex
	var failures []string
	var total nemesisStats
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				mu.Lock()
				stop := i >= runs || len(failures) >= 3
				mu.Unlock()
				if stop {
					return
				}
				st, err := runNemesis(pool, seed+i, fmt.Sprintf("nemesis_%d", i))
				mu.Lock()
				total.add(st)
				if err != nil {
					failures = append(failures, fmt.Sprintf("seed %d: %v", seed+i, err))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("%d sequences in %s: %s", total.sequences, time.Since(begin).Round(time.Millisecond), total)
	for _, f := range failures {
		t.Error(f)
	}
}

// nemesisStats counts what the sequences did, so that a run shows it
// exercised what it claims to.
type nemesisStats struct {
	sequences, events, truncates, keyChanges, parkedMax, replayIDs, replayAlls, restarts, daemonless int
}

func (s *nemesisStats) add(o nemesisStats) {
	s.sequences += o.sequences
	s.events += o.events
	s.truncates += o.truncates
	s.keyChanges += o.keyChanges
	s.parkedMax += o.parkedMax
	s.replayIDs += o.replayIDs
	s.replayAlls += o.replayAlls
	s.restarts += o.restarts
	s.daemonless += o.daemonless
}

func (s nemesisStats) String() string {
	return fmt.Sprintf("%d events (%d truncates, %d key changes), %d parked at peaks, %d replays by id, %d of all, %d restarts, %d ended daemon-less",
		s.events, s.truncates, s.keyChanges, s.parkedMax, s.replayIDs, s.replayAlls, s.restarts, s.daemonless)
}

// nemesis is one sequence.
type nemesis struct {
	rnd     *rand.Rand
	pool    *pgxpool.Pool
	store   *parking.Store
	name    string
	sink    *truncSink
	tracker *ack.Tracker
	queue   *fanout.Queue
	cfg     Config
	sched   *Scheduler
	stop    chan struct{}
	done    chan error
	cancel  context.CancelFunc
	lsn     uint64
	src     *model
	keys    map[string]map[int]bool // the source's keys, to draw valid changes
	ids     []pluginkit.EventID
	trace   []string
	log     *lockedBuffer
	stats   nemesisStats
}

var nemesisTables = []string{"a", "b"}

func runNemesis(pool *pgxpool.Pool, seed uint64, name string) (st nemesisStats, err error) {
	r := rand.New(rand.NewPCG(seed, 0x6e656d65))
	n := &nemesis{rnd: r, pool: pool, store: parking.New(pool, name), name: name, sink: newTruncSink(seed),
		tracker: ack.New([]ack.SinkSpec{{ID: "s", Durable: true}}, 0), queue: fanout.NewQueue(100000, true),
		lsn: 0x1000, src: newModel(), keys: map[string]map[int]bool{}, log: &lockedBuffer{}}
	n.sink.latency = time.Duration(r.IntN(3)) * 200 * time.Microsecond
	n.cfg = Config{SinkID: "s", BatchSize: 1 + r.IntN(5), MaxInFlight: 1 + r.IntN(4), Strict: r.IntN(5) == 0,
		RetryBase: time.Millisecond, MaxRetryDelay: 4 * time.Millisecond, MaxAttempts: 1 + r.IntN(3), Parked: n.store,
		Logger: slog.New(slog.NewTextHandler(n.log, nil))}
	n.stats.sequences = 1
	n.startScheduler()
	defer func() {
		if n.sched != nil {
			n.cancel()
			<-n.done
		}
		if err != nil {
			err = fmt.Errorf("%w\n  config: batch %d, lanes %d, strict %v, max_attempts %d\n  last actions:\n    %s\n  scheduler log (last lines):\n%s",
				err, n.cfg.BatchSize, n.cfg.MaxInFlight, n.cfg.Strict, n.cfg.MaxAttempts,
				strings.Join(lastN(n.trace, 40), "\n    "), tail(n.log.String(), 30))
		}
	}()
	steps := 15 + r.IntN(25)
	for range steps {
		if err := n.step(); err != nil {
			return n.stats, err
		}
	}
	if err := n.finish(); err != nil {
		return n.stats, err
	}
	return n.stats, n.check()
}

// step does one random thing: mostly a transaction, else a fault, a
// replay, a wait or a restart.
func (n *nemesis) step() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	switch k := n.rnd.IntN(100); {
	case k < 55:
		return n.commit()
	case k < 65:
		tb := nemesisTables[n.rnd.IntN(2)]
		key := fmt.Sprintf(`%s/{"id":%d}`, tb, n.rnd.IntN(8))
		n.sink.set(func(s *truncSink) {
			s.badKeys[key] = !s.badKeys[key]
			s.retryable = n.rnd.IntN(2) == 0
		})
		n.tracef("sink refuses %s: toggled", key)
	case k < 71:
		tb := nemesisTables[n.rnd.IntN(2)]
		n.sink.set(func(s *truncSink) { s.badTrunc[tb] = !s.badTrunc[tb] })
		n.tracef("sink refuses truncates of %s: toggled", tb)
	case k < 75:
		p := []float64{0, 0, 0.1, 0.3}[n.rnd.IntN(4)]
		n.sink.set(func(s *truncSink) { s.transient = p })
		n.tracef("sink fails %.0f%% of batches", 100*p)
	case k < 80:
		n.sink.heal()
		n.tracef("sink healed")
	case k < 88:
		ps, err := n.store.ListParked(ctx, "s", "")
		if err != nil {
			return err
		}
		n.stats.parkedMax = max(n.stats.parkedMax, len(ps))
		if len(ps) == 0 {
			return nil
		}
		id := ps[n.rnd.IntN(len(ps))].Event.ID
		n.stats.replayIDs++
		return n.replay(ctx, id)
	case k < 93:
		n.stats.replayAlls++
		return n.replay(ctx, pluginkit.EventID{})
	case k < 97:
		return n.quiesce()
	default:
		return n.restart()
	}
	return nil
}

// replay asks for a replay, and half the time waits until it ended.
func (n *nemesis) replay(ctx context.Context, id pluginkit.EventID) error {
	what := "all"
	if !id.IsZero() {
		what = "--id " + id.String()
	}
	if n.rnd.IntN(2) == 0 {
		n.tracef("replay %s", what)
		return n.sched.Replay(ctx, parking.ReplayRequest{Sink: "s", ID: id})
	}
	n.tracef("replay %s, waiting", what)
	select {
	case err := <-n.sched.ReplayWait(ctx, parking.ReplayRequest{Sink: "s", ID: id}):
		if err != nil && !strings.Contains(err.Error(), "is not parked") {
			return fmt.Errorf("replay %s: %w", what, err)
		}
		return nil
	case err := <-n.done:
		n.done <- err
		return fmt.Errorf("scheduler stopped during replay %s: %v", what, err)
	case <-ctx.Done():
		return fmt.Errorf("replay %s did not end within a minute", what)
	}
}

// commit commits one transaction of one to three changes (a TRUNCATE of
// both tables counts as one change of two events).
func (n *nemesis) commit() error {
	n.lsn += 0x100
	var items []fanout.Item
	for range 1 + n.rnd.IntN(3) {
		items = append(items, n.change()...)
	}
	var desc []string
	for i := range items {
		it := &items[i]
		it.Event.ID = pluginkit.EventID{CommitLSN: n.lsn, Index: uint64(i)}
		seq, err := n.tracker.Add(it.Event.ID)
		if err != nil {
			return err
		}
		it.Seq = seq
		n.src.apply(it.Event)
		n.ids = append(n.ids, it.Event.ID)
		n.stats.events++
		desc = append(desc, describe(it.Event, it.OldKey))
	}
	for _, it := range items {
		n.queue.C <- it
	}
	n.tracker.Commit(n.lsn + 8)
	n.tracef("commit %s", strings.Join(desc, ", "))
	return nil
}

// change draws one valid change of the source.
func (n *nemesis) change() []fanout.Item {
	tb := nemesisTables[n.rnd.IntN(2)]
	keys := n.keys[tb]
	if keys == nil {
		keys = map[int]bool{}
		n.keys[tb] = keys
	}
	ev := func(op pluginkit.Op, key int, oldKey []byte) fanout.Item {
		k := fmt.Appendf(nil, `{"id":%d}`, key)
		v := fmt.Sprintf("%s%d@%X", tb, key, n.lsn)
		return fanout.Item{Event: pluginkit.Event{Schema: "public", Table: tb, Op: op, Key: k, Payload: changePayload(v, string(oldKey))},
			OldKey: oldKey}
	}
	present, absent := []int{}, []int{}
	for k := range 8 {
		if keys[k] {
			present = append(present, k)
		} else {
			absent = append(absent, k)
		}
	}
	switch k := n.rnd.IntN(100); {
	case k < 8:
		n.stats.truncates++
		tables := []string{tb}
		if n.rnd.IntN(3) == 0 {
			tables = nemesisTables // one TRUNCATE naming both: an event per table
		}
		var out []fanout.Item
		for _, t := range tables {
			clear(n.keys[t])
			out = append(out, fanout.Item{Event: pluginkit.Event{Schema: "public", Table: t, Op: pluginkit.OpTruncate, Key: []byte("null"),
				Payload: changePayload("", "")}})
		}
		return out
	case len(present) == 0 || (k < 40 && len(absent) > 0):
		key := absent[n.rnd.IntN(len(absent))]
		keys[key] = true
		return []fanout.Item{ev(pluginkit.OpInsert, key, nil)}
	case k < 70:
		return []fanout.Item{ev(pluginkit.OpUpdate, present[n.rnd.IntN(len(present))], nil)}
	case k < 82 || len(absent) == 0:
		key := present[n.rnd.IntN(len(present))]
		delete(keys, key)
		return []fanout.Item{ev(pluginkit.OpDelete, key, nil)}
	default:
		from, to := present[n.rnd.IntN(len(present))], absent[n.rnd.IntN(len(absent))]
		delete(keys, from)
		keys[to] = true
		n.stats.keyChanges++
		return []fanout.Item{ev(pluginkit.OpUpdate, to, fmt.Appendf(nil, `{"id":%d}`, from))}
	}
}

func describe(ev pluginkit.Event, oldKey []byte) string {
	switch {
	case ev.Op == pluginkit.OpTruncate:
		return fmt.Sprintf("%s truncate %s", ev.ID, ev.Table)
	case oldKey != nil:
		return fmt.Sprintf("%s update %s %s→%s", ev.ID, ev.Table, oldKey, ev.Key)
	}
	return fmt.Sprintf("%s %s %s %s", ev.ID, ev.Op, ev.Table, ev.Key)
}

func (n *nemesis) startScheduler() {
	ctx, cancel := context.WithCancel(context.Background())
	n.sched, n.cancel = New(n.cfg, n.queue, n.tracker, n.sink), cancel
	n.stop, n.done = make(chan struct{}), make(chan error, 1)
	s, stop, done := n.sched, n.stop, n.done
	go func() { done <- s.Run(ctx, stop) }()
}

// stopScheduler stops the scheduler the way the daemon does on SIGTERM.
func (n *nemesis) stopScheduler() error {
	close(n.stop)
	defer func() { n.cancel(); n.sched = nil }()
	select {
	case err := <-n.done:
		return err
	case <-time.After(time.Minute):
		return errors.New("the scheduler did not stop within a minute")
	}
}

// quiesce waits until every live event is resolved (delivered or parked).
func (n *nemesis) quiesce() error {
	n.tracef("wait until every live event is resolved")
	deadline := time.Now().Add(time.Minute)
	for n.tracker.Pending(0) > 0 {
		select {
		case err := <-n.done:
			n.done <- err
			return fmt.Errorf("the scheduler stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d live events still unresolved after a minute", n.tracker.Pending(0))
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// restart stops the scheduler once every live event is resolved (the
// daemon would get the unresolved ones again from the slot; this harness
// has no slot) and starts a new one, which knows what is parked only from
// walcast.parked. Replays under way are abandoned, as on a real restart.
func (n *nemesis) restart() error {
	if err := n.quiesce(); err != nil {
		return err
	}
	n.tracef("restart the scheduler")
	n.stats.restarts++
	if err := n.stopScheduler(); err != nil {
		return err
	}
	n.startScheduler()
	return nil
}

// finish heals the sink and replays everything parked: through the
// running scheduler, with changes still arriving during the first replay
// of all, or, a third of the time, daemon-less with ReplayParked (a
// replay by id first, half the time, then of all).
func (n *nemesis) finish() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n.sink.heal()
	n.tracef("sink healed for the end")
	if err := n.quiesce(); err != nil {
		return err
	}
	if n.rnd.IntN(3) != 0 {
		// Changes keep arriving during the first replay. What waits only
		// for the replay joins it; anything else is left for the next.
		for try := 0; ; try++ {
			n.tracef("replay all, waiting")
			done := n.sched.ReplayWait(ctx, parking.ReplayRequest{Sink: "s"})
			if try == 0 {
				for range n.rnd.IntN(4) {
					if err := n.commit(); err != nil {
						return err
					}
				}
			}
			select {
			case err := <-done:
				if err != nil {
					return fmt.Errorf("replay of all: %w", err)
				}
			case <-ctx.Done():
				return errors.New("a replay of all did not end in time")
			}
			if err := n.quiesce(); err != nil {
				return err
			}
			left, err := n.parkedWhenIdle()
			if err != nil {
				return err
			}
			if left == 0 {
				return n.stopScheduler()
			}
			if try == 5 {
				return fmt.Errorf("%d events still parked after 5 replays of all with the sink healed", left)
			}
		}
	}
	n.stats.daemonless++
	if err := n.stopScheduler(); err != nil {
		return err
	}
	for try := 0; ; try++ {
		ps, err := n.store.ListParked(ctx, "s", "")
		if err != nil {
			return err
		}
		n.stats.parkedMax = max(n.stats.parkedMax, len(ps))
		if len(ps) == 0 {
			return nil
		}
		if try == 2 {
			return fmt.Errorf("%d events still parked after a daemon-less replay of all with the sink healed", len(ps))
		}
		var id pluginkit.EventID
		if try == 0 && n.rnd.IntN(2) == 0 {
			id = ps[n.rnd.IntN(len(ps))].Event.ID
		}
		n.tracef("daemon-less replay %v", id)
		if _, err := ReplayParked(ctx, n.cfg, n.sink, parking.ReplayRequest{Sink: "s", ID: id}); err != nil {
			return fmt.Errorf("daemon-less replay %v: %w", id, err)
		}
	}
}

// check compares what arrived with the source.
// parkedWhenIdle returns how many events are parked once the scheduler
// holds nothing pending or in flight (events that joined a replay that
// already ended may still be on their way).
func (n *nemesis) parkedWhenIdle() (int, error) {
	deadline := time.Now().Add(time.Minute)
	for n.sched.Stats.Held.Load() > 0 {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the scheduler still holds %d events after a minute", n.sched.Stats.Held.Load())
		}
		time.Sleep(time.Millisecond)
	}
	ps, err := n.store.ListParked(context.Background(), "s", "")
	return len(ps), err
}

func (n *nemesis) check() error {
	got := n.sink.delivered()
	arrived := map[pluginkit.EventID]bool{}
	for _, e := range got {
		arrived[e.ID] = true
	}
	for _, id := range n.ids {
		if !arrived[id] {
			return fmt.Errorf("event %s never arrived (and nothing is parked)", id)
		}
	}
	if len(arrived) != len(n.ids) {
		return fmt.Errorf("%d distinct events arrived, %d were committed", len(arrived), len(n.ids))
	}
	n.sink.mu.Lock()
	v := n.sink.violation
	n.sink.mu.Unlock()
	if v != "" {
		return errors.New(v)
	}
	if v := checkOrder(got); v != "" {
		return fmt.Errorf("order: %s\n  arrival order:\n    %s", v, strings.Join(ids(firstCopies(got)), "\n    "))
	}
	if d := mirrorOf(got).diff(n.src); d != "" {
		return fmt.Errorf("mirror: %s\n  arrival order:\n    %s", d, strings.Join(ids(firstCopies(got)), "\n    "))
	}
	_, err := n.pool.Exec(context.Background(), `DELETE FROM walcast.parked WHERE pipeline = $1`, n.name)
	return err
}

func (n *nemesis) tracef(format string, args ...any) {
	n.trace = append(n.trace, fmt.Sprintf(format, args...))
}

func lastN(s []string, k int) []string {
	return s[max(0, len(s)-k):]
}

func tail(s string, k int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return "    " + strings.Join(lastN(lines, k), "\n    ")
}

// lockedBuffer is a log destination shared by goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
