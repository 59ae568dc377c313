package leader

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	case <-ctx.Done():
		t.Fatal("the old leader did not notice it lost its session")
	}
	if _, err := a.Exec(ctx, `SELECT 1`); !errors.Is(err, ErrLost) {
		t.Fatalf("a write of the old leader returned %v, want ErrLost", err)
	}
	// Acquire gives up (nil) when ctx, the test's deadline, ends.
	b := <-got
	if b == nil {
		t.Fatal("the standby did not take over")
	}
	if h, _, _ := Current(ctx, db, "shop"); h.Name != "walcast b" {
		t.Fatalf("leader after takeover = %q, want walcast b", h.Name)
	}
	a.Release(ctx)

	// A graceful release hands over: the standby takes the lock at its
	// next poll (the time it took is logged).
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
	if c == nil {
		t.Fatal("the standby did not take over from a graceful release")
	}
	t.Logf("handover after a release: %s", time.Since(start).Round(time.Millisecond))
	c.Release(ctx)
	// The server ends the session a moment after the client closes it.
	for ; ; time.Sleep(20 * time.Millisecond) {
		if _, ok, _ := Current(ctx, db, "shop"); !ok {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("a released lock is still held")
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

// TestCancelledWriteKeepsTheLease: a write through the lease whose caller
// gives up while it runs (a graceful stop cancelling its writers) must not
// close the lock session: pgx closes a connection whose query is
// cancelled, which would hand the pipeline to a standby mid-shutdown.
func TestCancelledWriteKeepsTheLease(t *testing.T) {
	ctx := context.Background()
	dsn := cluster.Database(t)
	l, err := Acquire(ctx, fast(dsn, "walcast a"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	l.Exec(wctx, `SELECT pg_sleep(0.15)`) // longer than wctx, within the session's own bound (2 × CheckInterval)
	if err := l.Err(); err != nil {
		t.Fatalf("the lease was lost by a cancelled write: %v", err)
	}
	if _, err := l.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatalf("the lock session does not work after a cancelled write: %v", err)
	}
	if _, err := l.Exec(wctx, `SELECT 1`); err == nil {
		t.Fatal("a write with an ended context ran")
	}
}
