package leader

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
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
	// long WaitOutPredecessor took once it leads, and whether it said it
	// waited out its predecessor's lease.
	successor := func(holder string, stop func()) (*Lease, time.Duration, bool) {
		t.Helper()
		var log logLines
		got := make(chan *Lease, 1)
		go func() {
			c := cfg(holder)
			c.Logger = log.logger()
			l, err := Acquire(ctx, c)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		log.wait(ctx, t, standingBy)
		stop()
		l := <-got
		if l == nil {
			t.FailNow()
		}
		start := time.Now()
		if err := l.WaitOutPredecessor(ctx); err != nil {
			t.Fatal(err)
		}
		return l, time.Since(start), log.has(leaseWait)
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
	b, waited, waitedOut := successor("walcast b", func() {
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("after a release the successor waited %s", waited)
	if waitedOut {
		t.Errorf("after a released term the successor waited out its predecessor's lease (%s) before streaming, want at once", waited)
	}
	if released() {
		t.Error("the released mark outlived the term that wrote it: the new leader must clear it")
	}

	h, _, err := Current(ctx, db, "shop")
	if err != nil {
		t.Fatal(err)
	}
	c, waited, _ := successor("walcast c", func() {
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
	var log logLines
	go func() {
		c := cfg("walcast b")
		c.Logger = log.logger()
		b, err := Acquire(ctx, c)
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	log.wait(ctx, t, standingBy) // b stands by for a
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

// What Acquire and WaitOutPredecessor log: a standby saw a leader, and a
// successor waits out the lease of one that vanished.
const (
	standingBy = "standing by: another walcast streams this pipeline"
	leaseWait  = "waiting out its lease before streaming"
)

// logLines records the messages a lease logs, for a test to wait on.
type logLines struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logLines) logger() *slog.Logger { return slog.New(l) }

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logLines) WithGroup(string) slog.Handler            { return l }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}

// has reports whether a message containing substr was logged.
func (l *logLines) has(substr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.ContainsFunc(l.msgs, func(m string) bool { return strings.Contains(m, substr) })
}

// wait returns once a message containing substr was logged; it fails the
// test when ctx ends first.
func (l *logLines) wait(ctx context.Context, t *testing.T, substr string) {
	t.Helper()
	for !l.has(substr) {
		select {
		case <-ctx.Done():
			t.Fatalf("%q never logged", substr)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
