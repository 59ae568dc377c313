package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/host/internal/control/leader"
	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/control/schema"
	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/host/internal/delivery/fanout"
	"github.com/walcast/walcast/host/internal/delivery/schedule"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// TestLostLeaseIsNoSinkFailure drives a sink's scheduler through the
// lease's fence after the lease was lost (its session terminated), with a
// policy that parks at the first failed attempt. Nothing else stops the
// scheduler, so whatever the refused deliveries do is visible: they must
// end the term's deliveries (the scheduler returns) without counting a
// failure or parking anything.
func TestLostLeaseIsNoSinkFailure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn := cluster.Database(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	lease, err := leader.Acquire(ctx, leader.Config{DSN: dsn, Pipeline: "p", CheckInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	store := parking.New(fenced{Pool: pool, lease: lease}, "p")
	if err := schema.Migrate(ctx, fenced{Pool: pool, lease: lease}); err != nil {
		t.Fatal(err)
	}

	tracker := ack.New([]ack.SinkSpec{{ID: "s", Durable: true}}, 0)
	queue := fanout.NewQueue(1024, true)
	queue.Sink = "s"
	fan := fanout.New(tracker, []*fanout.Queue{queue})
	hard, halt := context.WithCancel(ctx)
	defer halt()
	sink := &memSink{}
	sched := schedule.New(schedule.Config{SinkID: "s", BatchSize: 1, MaxInFlight: 8, RetryBase: 10 * time.Millisecond,
		MaxAttempts: 1, Parked: store, Logger: slog.New(slog.DiscardHandler)}, queue, tracker, fencedPlugin{Plugin: sink, lease: lease, halt: halt})

	var pid int
	if err := pool.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid = $1::int::oid AND objid = $2::int::oid`,
		leaderKeys("p")...).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Lost():
	case <-time.After(30 * time.Second):
		t.Fatal("the lease was not lost within 30s of its session ending")
	}

	ran := make(chan error, 1)
	go func() { ran <- sched.Run(hard, make(chan struct{})) }()
	const events = 50
	for i := range events {
		id := cdc.EventID{CommitLSN: 0x100 + uint64(i)*0x10}
		ev := change.Event{Event: cdc.Event{ID: id, Schema: "public", Table: "t", Op: cdc.OpInsert,
			Key: fmt.Appendf(nil, `{"id":%d}`, i), Payload: fmt.Appendf(nil, `{"id":"%s"}`, id)}}
		if err := fan.Event(hard, ev, func() {}); err != nil {
			break // the deliveries were halted: nothing more is taken
		}
		tracker.Commit(id.CommitLSN + 8)
	}
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("the scheduler ended with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the scheduler still delivers 30s after the lease was lost: %d failed attempts, %d parked", sched.Stats.Failures.Load(), sched.Stats.Parked.Load())
	}
	var parked int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM walcast.parked`).Scan(&parked); err != nil {
		t.Fatal(err)
	}
	if f, p := sched.Stats.Failures.Load(), sched.Stats.Parked.Load(); f != 0 || p != 0 || parked != 0 {
		t.Fatalf("deliveries refused for the lost lease counted as %d failed attempts of the sink, %d events parked (%d in walcast.parked)", f, p, parked)
	}
	if n := sink.count(); n != 0 {
		t.Fatalf("%d events reached the sink after the lease was lost", n)
	}
}

func leaderKeys(pipeline string) []any {
	class, obj := leader.Keys(pipeline)
	return []any{class, obj}
}
