// Command library keeps a copy of the orders table up to date using
// walcast's library mode, with exactly-once processing on top of
// at-least-once delivery.
//
// Delivery is at-least-once: after a crash, changes that were applied but
// not yet acknowledged arrive again. So each change is applied in one
// database transaction together with a row in processed_events keyed by
// the event id; a redelivered event finds its id there and is skipped.
// Only after that transaction commits is the event acknowledged. Any
// effect becomes safe this way, including ones that are not idempotent
// (counters, e-mails queued in an outbox table).
//
// Usage:
//
//	WALCAST_DSN=postgres://localhost/shop go run ./examples/library
//
// The database needs wal_level = logical. Then change public.orders and
// watch public.orders_replica follow.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host"
	"github.com/walcast/walcast/pluginkit/cdc"
)

func main() { os.Exit(run()) }

func run() int {
	dsn := flag.String("dsn", os.Getenv("WALCAST_DSN"), "source database `url` (default $WALCAST_DSN)")
	slot := flag.String("slot", "orders_replica", "replication slot `name`; created when missing")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := replicate(ctx, *dsn, *slot, log); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("replicate orders", "err", err)
		return 1
	}
	return 0
}

const schema = `
CREATE TABLE IF NOT EXISTS orders (id int PRIMARY KEY, status text NOT NULL, total numeric(10,2) NOT NULL);
CREATE TABLE IF NOT EXISTS orders_replica (LIKE orders INCLUDING ALL);
CREATE TABLE IF NOT EXISTS processed_events (event_id text PRIMARY KEY, processed_at timestamptz NOT NULL DEFAULT now());`

// replicate applies every change of public.orders to orders_replica until
// ctx ends.
func replicate(ctx context.Context, dsn, slot string, log *slog.Logger) error {
	db, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer db.Close()
	if _, err := db.Exec(ctx, schema); err != nil {
		return fmt.Errorf("create tables: %w", err)
	}
	stream, err := host.Open(ctx, host.StreamConfig{
		DSN:    dsn,
		Tables: []string{"public.orders"},
		Slot:   slot,
		Logger: log,
	})
	if err != nil {
		return err
	}
	defer stream.Close(context.Background())
	log.Info("replicating public.orders to orders_replica", "slot", slot)
	for {
		ev, err := stream.Next(ctx)
		if err != nil {
			return err
		}
		applied, err := apply(ctx, db, ev)
		if err != nil {
			return err
		}
		log.Info("change", "id", ev.ID, "op", ev.Op, "key", string(ev.Key), "applied", applied)
		if err := stream.Ack(ev.ID); err != nil {
			return err
		}
	}
}

// apply makes ev's effect and records ev.ID in one transaction. It
// reports false when the event had been processed before.
func apply(ctx context.Context, db *pgxpool.Pool, ev host.Event) (applied bool, err error) {
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO processed_events (event_id) VALUES ($1) ON CONFLICT DO NOTHING`, ev.ID.String())
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return nil // a redelivery: the effect is already there
		}
		applied = true
		switch ev.Op {
		case cdc.OpInsert, cdc.OpUpdate:
			if ev.Old != nil { // the key changed: the row moves
				if _, err := tx.Exec(ctx, `DELETE FROM orders_replica WHERE id = ($1::jsonb->>'id')::int`, ev.Old); err != nil {
					return err
				}
			}
			// orders has no TOASTable column, so New is always the whole
			// row; a table with one would keep the columns in ev.Unchanged.
			_, err = tx.Exec(ctx, `
INSERT INTO orders_replica SELECT * FROM jsonb_populate_record(NULL::orders_replica, $1)
ON CONFLICT (id) DO UPDATE SET status = excluded.status, total = excluded.total`, ev.New)
		case cdc.OpDelete:
			_, err = tx.Exec(ctx, `DELETE FROM orders_replica WHERE id = ($1::jsonb->>'id')::int`, ev.Key)
		case cdc.OpTruncate:
			_, err = tx.Exec(ctx, `DELETE FROM orders_replica`)
		}
		return err
	})
	if err != nil {
		return false, fmt.Errorf("apply event %s: %w", ev.ID, err)
	}
	return applied, nil
}
