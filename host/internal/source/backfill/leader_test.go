package backfill

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/control/schema"
	"github.com/walcast/walcast/host/pgtest"
)

// TestChunksStopWhenLeadershipLost: a runner whose leader's lock session
// ends (cut off, terminated) while a chunk is being read lets that chunk
// commit, writes no chunk after it and returns, leaving the backfill
// running for whoever leads next.
func TestChunksStopWhenLeadershipLost(t *testing.T) {
	ctx := context.Background()
	cluster := pgtest.New(t, pgtest.Options{})
	dsn := cluster.Database(t)
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	for _, sql := range []string{
		`CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)`,
		`INSERT INTO t SELECT g, 0 FROM generate_series(1, 1000) g`,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := schema.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	tbl, err := Inspect(ctx, db, "public.t")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := Request(ctx, db, "p", []Table{tbl}, nil)
	if err != nil {
		t.Fatal(err)
	}
	lock, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(ctx)
	if _, err := lock.Exec(ctx, `SELECT pg_advisory_lock(7, 8)`); err != nil {
		t.Fatal(err)
	}
	pid := lock.PgConn().PID()
	const lostIn = 3
	r := NewRunner(Config{DSN: dsn, Pipeline: "p", ChunkRows: 100, Leader: &Lock{PID: pid, Class: 7, Obj: 8},
		ChunkRead: func(_, chunk int64) {
			if chunk != lostIn {
				return
			}
			if _, err := db.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
				t.Error(err)
				return
			}
			// The lock goes with the backend a moment later.
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				var held bool
				db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1)`, int32(pid)).Scan(&held)
				if !held {
					return
				}
			}
			t.Error("the terminated session still holds its lock after 10s")
		}})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		b, _ := Get(ctx, db, ids[0])
		t.Fatalf("the runner still runs a minute after its leader's lock went: backfill %s, %d chunks", b.State, b.Chunks)
	}
	b, err := Get(ctx, db, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if b.Chunks != lostIn || b.State != StateRunning {
		t.Fatalf("after the lock went during chunk %d: backfill %s with %d chunks done, want running with %d", lostIn, b.State, b.Chunks, lostIn)
	}
}
