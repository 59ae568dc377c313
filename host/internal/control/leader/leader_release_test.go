package leader

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/control/schema"
)

// A successor that stood by starts at once after a released term, and
// waits out the lease of a leader whose session ended without a release
// (killed, frozen, cut off): that leader may still deliver until its lease
// goes stale.
func TestSuccessorWaitsOnlyForAVanishedLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, cfg := slowLeases(ctx, t)
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

// A leader frozen with a fresh lease (here: its session's mutex held, so
// its watcher cannot ping and learn it lost) whose session is then ended
// must have a stale lease by the time its successor may stream: its
// deliveries and confirmations pass only while the lease is fresh, so the
// two never deliver at once.
func TestFrozenLeaderIsStaleBeforeItsSuccessorStreams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, cfg := slowLeases(ctx, t)
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
	for !a.Fresh() || time.Since(a.base)-time.Duration(a.alive.Load()) > 200*time.Millisecond {
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

// slowLeases prepares a database with the walcast schema (where a term's
// release is recorded) and returns a connection to it and configs whose
// leases are fresh for three 1 s check intervals: long enough to tell a
// wait from none on a loaded machine.
func slowLeases(ctx context.Context, t *testing.T) (*pgx.Conn, func(holder string) Config) {
	t.Helper()
	dsn := cluster.Database(t)
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	if err := schema.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	return db, func(holder string) Config {
		c := fast(dsn, holder)
		c.CheckInterval = time.Second
		return c
	}
}
