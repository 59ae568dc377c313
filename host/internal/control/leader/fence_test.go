package leader

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestLongWriteKeepsTheLease: a write on the lock session that takes
// longer than the check interval because it carries a lot (a batch of
// parked events) is the session at work: the lease must not be lost to it,
// neither by the write's own bound nor by a ping that waited for it.
func TestLongWriteKeepsTheLease(t *testing.T) {
	ctx := context.Background()
	dsn := cluster.Database(t)
	l, err := Acquire(ctx, fast(dsn, "walcast a"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	big := bytes.Repeat([]byte("p"), 8<<20)
	// 0.5 s: five check intervals, well within the 2 s its 8 MiB allow.
	if _, err := l.Exec(ctx, `SELECT pg_sleep(0.5), length($1::bytea)`, big); err != nil {
		t.Fatalf("a long write through the lease failed: %v", err)
	}
	// The watcher pings once the session is free again: the lease is
	// fresh again, unless the write lost it.
	for deadline := time.Now().Add(time.Minute); !l.Fresh() && l.Err() == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the lease is not fresh a minute after a long write ended")
		}
	}
	if err := l.Err(); err != nil {
		t.Fatalf("the lease was lost to a long write: %v", err)
	}
}

// TestTransactionThroughTheLease: writes that must commit together run in
// a transaction on the lock session, so they cannot commit once that
// session is gone.
func TestTransactionThroughTheLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := cluster.Database(t)
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	if _, err := db.Exec(ctx, `CREATE TABLE marks (n int)`); err != nil {
		t.Fatal(err)
	}
	l, err := Acquire(ctx, fast(dsn, "walcast a"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	count := func() int {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM marks`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	tx, err := l.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO marks VALUES (1), (2)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tx.Rollback(ctx) // after Commit: a no-op that must not free the session twice
	if n := count(); n != 2 {
		t.Fatalf("%d rows after the commit, want 2", n)
	}
	// The session is free again: a write and a ping go through.
	if _, err := l.Exec(ctx, `INSERT INTO marks VALUES (3)`); err != nil {
		t.Fatal(err)
	}

	// The session dies while a transaction is open: nothing of it commits,
	// and the lease is lost.
	h, _, err := Current(ctx, db, "shop")
	if err != nil {
		t.Fatal(err)
	}
	tx, err = l.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO marks VALUES (4)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `SELECT pg_terminate_backend($1)`, h.PID); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("a transaction on a terminated lock session committed")
	}
	select {
	case <-l.Lost():
	case <-ctx.Done():
		t.Fatal("the lease was not lost with its session")
	}
	if n := count(); n != 3 {
		t.Fatalf("%d rows after the session died, want 3", n)
	}
	if _, err := l.Begin(ctx); !errors.Is(err, ErrLost) {
		t.Fatalf("Begin on a lost lease returned %v, want ErrLost", err)
	}
}
