package main

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host"
	"github.com/walcast/walcast/host/pgtest"
)

func TestReplicateAppliesOnce(t *testing.T) {
	cluster := pgtest.New(t, pgtest.Options{})
	ctx := context.Background()
	dsn := cluster.DSN("postgres")
	db, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- replicate(runCtx, dsn, "orders_replica", slog.New(slog.DiscardHandler)) }()
	// replicate creates the tables, then the slot; wait for both.
	waitFor(t, "the slot", func() bool {
		var n int
		return db.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'orders_replica'`).Scan(&n) == nil && n == 1
	})
	for _, sql := range []string{
		`INSERT INTO orders VALUES (1, 'new', 10), (2, 'new', 20), (3, 'new', 30)`,
		`UPDATE orders SET status = 'paid' WHERE id = 1`,
		`UPDATE orders SET id = 4 WHERE id = 2`,
		`DELETE FROM orders WHERE id = 3`,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	const same = `SELECT (SELECT array_agg(o ORDER BY id)::text FROM orders o) IS NOT DISTINCT FROM (SELECT array_agg(r ORDER BY id)::text FROM orders_replica r)`
	waitFor(t, "the replica to match", func() bool {
		var ok bool
		return db.QueryRow(ctx, same).Scan(&ok) == nil && ok
	})
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}

	// A redelivered event is recognised by its id and changes nothing.
	stream, err := host.Open(ctx, host.StreamConfig{DSN: dsn, Tables: []string{"public.orders"}, Slot: "again"})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close(context.Background())
	if _, err := db.Exec(ctx, `INSERT INTO orders VALUES (5, 'new', 50)`); err != nil {
		t.Fatal(err)
	}
	nctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ev, err := stream.Next(nctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		applied, err := apply(ctx, db, ev)
		if err != nil || applied != want {
			t.Fatalf("apply #%d of %s = %v, %v; want %v", i+1, ev.ID, applied, err, want)
		}
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM orders_replica WHERE id = 5`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("replica has %d rows for id 5 (%v)", n, err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
