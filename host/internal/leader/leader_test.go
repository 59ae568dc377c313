package leader

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/checkpoint"
	"github.com/walcast/walcast/host/pgtest"
)

var cluster *pgtest.Cluster

func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }

func fast(dsn, holder string) Config {
	return Config{DSN: dsn, Pipeline: "shop", Holder: holder, PollInterval: 100 * time.Millisecond, CheckInterval: 100 * time.Millisecond}
}

// One leader at a time; a standby takes over when the leader's session
// ends, and the old leader learns it lost and can no longer write.
func TestTakeoverAndFencing(t *testing.T) {
	dsn := cluster.Database(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := Acquire(ctx, fast(dsn, "walcast a"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lease, 1)
	go func() {
		b, err := Acquire(ctx, fast(dsn, "walcast b"))
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	h, ok, err := Current(ctx, db, "shop")
	if err != nil || !ok || h.Name != "walcast a" {
		t.Fatalf("Current = %+v, %v, %v; want walcast a", h, ok, err)
	}
	select {
	case <-got:
		t.Fatal("a second process acquired the lock while the first held it")
	case <-time.After(500 * time.Millisecond):
	}
	if _, err := a.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatalf("the leader cannot write: %v", err)
	}

	// The leader's session dies (a network cut, an administrator): it
	// must notice, and the standby must take over.
	if _, err := db.Exec(ctx, `SELECT pg_terminate_backend($1)`, h.PID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the old leader did not notice it lost its session")
	}
	if _, err := a.Exec(ctx, `SELECT 1`); !errors.Is(err, ErrLost) {
		t.Fatalf("a write of the old leader returned %v, want ErrLost", err)
	}
	var b *Lease
	select {
	case b = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the standby did not take over")
	}
	if h, _, _ := Current(ctx, db, "shop"); h.Name != "walcast b" {
		t.Fatalf("leader after takeover = %q, want walcast b", h.Name)
	}
	a.Release(ctx)

	// A graceful release hands over at once.
	start := time.Now()
	go func() {
		c, err := Acquire(ctx, fast(dsn, "walcast c"))
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
	time.Sleep(200 * time.Millisecond)
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	c := <-got
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("handover took %s", took)
	}
	c.Release(ctx)
	// The server ends the session a moment after the client closes it.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, ok, _ := Current(ctx, db, "shop"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a released lock is still held after 5s")
		}
	}
}

// Pipelines have locks of their own.
func TestPipelinesDoNotShareALock(t *testing.T) {
	dsn := cluster.Database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := Acquire(ctx, fast(dsn, "walcast a"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	cfg := fast(dsn, "walcast b")
	cfg.Pipeline = "billing"
	b, err := Acquire(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.Release(ctx)
}

// A successor that stood by starts at once after a released term, and
// waits out the lease of a leader whose session ended without a release
// (killed, frozen, cut off): that leader may still deliver until its lease
// goes stale.
func TestSuccessorWaitsOnlyForAVanishedLeader(t *testing.T) {
	dsn := cluster.Database(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	if err := checkpoint.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	// A lease is fresh for three check intervals: 3s here, long enough to
	// tell a wait from none on a loaded machine.
	cfg := func(holder string) Config {
		c := fast(dsn, holder)
		c.CheckInterval = time.Second
		return c
	}
	// successor stands by for lead until stop hands over, and returns how
	// long WaitOutPredecessor took once it leads.
	successor := func(holder string, stop func()) (*Lease, time.Duration) {
		t.Helper()
		got := make(chan *Lease, 1)
		go func() {
			l, err := Acquire(ctx, cfg(holder))
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		// Seen standing by for the leader: Acquire polled at least twice.
		time.Sleep(300 * time.Millisecond)
		stop()
		l := <-got
		if l == nil {
			t.FailNow()
		}
		start := time.Now()
		if err := l.WaitOutPredecessor(ctx); err != nil {
			t.Fatal(err)
		}
		return l, time.Since(start)
	}
	released := func() bool {
		var r bool
		if err := db.QueryRow(ctx, `SELECT released_at IS NOT NULL FROM walcast.leaderships WHERE pipeline = 'shop'`).Scan(&r); err != nil {
			t.Fatal(err)
		}
		return r
	}

	a, err := Acquire(ctx, cfg("walcast a"))
	if err != nil {
		t.Fatal(err)
	}
	b, waited := successor("walcast b", func() {
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("after a release the successor waited %s", waited)
	if waited > 500*time.Millisecond {
		t.Errorf("after a released term the successor waited %s before streaming, want at once", waited)
	}
	if released() {
		t.Error("the released mark outlived the term that wrote it: the new leader must clear it")
	}

	h, _, err := Current(ctx, db, "shop")
	if err != nil {
		t.Fatal(err)
	}
	c, waited := successor("walcast c", func() {
		if _, err := db.Exec(ctx, `SELECT pg_terminate_backend($1)`, h.PID); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("after a vanished leader the successor waited %s", waited)
	if waited < time.Second {
		t.Errorf("after a leader vanished without releasing, the successor waited %s, want its lease's freshness (3s) less the time to take the lock", waited)
	}
	b.Release(ctx)
	c.Release(ctx)
}

// A write cancelled by its caller mid-statement (a graceful stop cancels
// the checkpoint loop) completes instead of closing the lock session: the
// leadership, the final checkpoints and the released mark survive it.
func TestCancelledWriteKeepsTheLease(t *testing.T) {
	dsn := cluster.Database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Pings time out after two check intervals, and wait for the write.
	cfg := fast(dsn, "walcast a")
	cfg.CheckInterval = time.Second
	a, err := Acquire(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Release(ctx)
	wctx, stop := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, stop)
	if _, err := a.Exec(wctx, `SELECT pg_sleep(0.5)`); err != nil {
		t.Errorf("a write cancelled mid-statement failed: %v", err)
	}
	if _, err := a.Exec(wctx, `SELECT 1`); !errors.Is(err, context.Canceled) {
		t.Errorf("a write with a cancelled context returned %v, want context.Canceled", err)
	}
	// The watcher would have seen a closed session by its next ping.
	time.Sleep(1500 * time.Millisecond)
	if err := a.Err(); err != nil {
		t.Fatalf("the lease was lost by a cancelled write: %v", err)
	}
	if _, err := a.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatalf("the leader cannot write after a cancelled write: %v", err)
	}
}

// A leader frozen with a fresh lease (here: its session's mutex held, so
// its watcher cannot ping and learn it lost) whose session is then ended
// must have a stale lease by the time its successor may stream: its
// deliveries and confirmations pass only while the lease is fresh, so the
// two never deliver at once.
func TestFrozenLeaderIsStaleBeforeItsSuccessorStreams(t *testing.T) {
	dsn := cluster.Database(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	if err := checkpoint.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	cfg := func(holder string) Config {
		c := fast(dsn, holder)
		c.CheckInterval = time.Second
		return c
	}
	a, err := Acquire(ctx, cfg("walcast a"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lease, 1)
	go func() {
		b, err := Acquire(ctx, cfg("walcast b"))
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	time.Sleep(300 * time.Millisecond) // b stands by for a
	h, _, err := Current(ctx, db, "shop")
	if err != nil {
		t.Fatal(err)
	}
	// Wait for a fresh ping, then freeze a and cut its session.
	for !a.Fresh() || time.Since(a.base)-time.Duration(a.confirmed.Load()) > 200*time.Millisecond {
		time.Sleep(10 * time.Millisecond)
	}
	a.mu.Lock()
	if _, err := db.Exec(ctx, `SELECT pg_terminate_backend($1)`, h.PID); err != nil {
		t.Fatal(err)
	}
	b := <-got
	if b == nil {
		t.FailNow()
	}
	if err := b.WaitOutPredecessor(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Fresh() {
		t.Error("the successor may stream while the frozen old leader's lease is still fresh: both could deliver")
	}
	a.mu.Unlock()
	a.Release(ctx)
	b.Release(ctx)
}
