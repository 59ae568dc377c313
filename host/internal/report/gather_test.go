package report

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/control/checkpoints"
	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/control/pauses"
	"github.com/walcast/walcast/host/internal/control/reports"
	"github.com/walcast/walcast/host/internal/control/schema"
	"github.com/walcast/walcast/host/internal/source/capture"
	"github.com/walcast/walcast/host/pgtest"
	"github.com/walcast/walcast/pluginkit/cdc"
)

var cluster *pgtest.Cluster

func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }

// fixture is pipeline "shop" with sinks hook and archive in a fresh
// database: a slot, hook's checkpoint, usage, archive paused, and parked
// events of hook and of "gone", a sink no longer in the file.
func fixture(t *testing.T) Pipeline {
	t.Helper()
	ctx := context.Background()
	dsn := cluster.Database(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	slot := "walcast_report_" + time.Now().Format("150405000000")
	if _, err := pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, slot) })
	if err := checkpoints.New(pool, "shop").Save(ctx, map[string]cdc.EventID{"hook": cdc.MustParseEventID("0/16B3F00:7")}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var parked []parking.Event
	for i, sink := range []string{"hook", "gone", "gone"} {
		parked = append(parked, parking.Event{Sink: sink, Row: "r", Attempts: 1, LastError: "boom", FirstFailure: now, LastFailure: now,
			Event: cdc.Event{ID: cdc.EventID{CommitLSN: 0x100, Index: uint64(i)}, Schema: "public", Table: "orders", Op: cdc.OpInsert,
				Key: []byte(`{}`), Payload: []byte(`{}`)}})
	}
	if err := parking.New(pool, "shop").Park(ctx, parked); err != nil {
		t.Fatal(err)
	}
	if err := reports.New(pool, "shop").AddUsage(ctx, []reports.Usage{{Sink: "hook", Hour: now.Truncate(time.Hour), Attempts: 2, Delivered: 9, Bytes: 512}}); err != nil {
		t.Fatal(err)
	}
	if _, err := pauses.New(pool, "shop").SetPaused(ctx, "archive", true); err != nil {
		t.Fatal(err)
	}
	return Pipeline{Name: "shop", Slot: slot, DB: pool,
		Sinks:   []Sink{{ID: "hook", Type: "webhook", Durable: true}, {ID: "archive", Type: "batchfiles"}},
		Capture: capture.Config{DSN: dsn, Slot: slot, Publication: "walcast_shop", Tables: []string{"public.orders"}}}
}

func TestGatherJoinsTheTablesPerSink(t *testing.T) {
	p := fixture(t)
	st, err := Gather(context.Background(), p, Parts{RecentParked: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Slot.Exists || st.Slot.Active || st.Slot.Current == 0 || st.Slot.Name != p.Slot {
		t.Errorf("slot %+v, want an inactive slot %s and the server's WAL position", st.Slot, p.Slot)
	}
	if len(st.Sinks) != 2 || st.Sinks[0].ID != "hook" || st.Sinks[1].ID != "archive" {
		t.Fatalf("sinks %+v, want hook and archive in the file's order", st.Sinks)
	}
	hook, archive := st.Sinks[0], st.Sinks[1]
	if hook.Checkpoint == nil || hook.Checkpoint.String() != "0/16B3F00:7" || archive.Checkpoint != nil {
		t.Errorf("checkpoints %v, %v; want hook's only", hook.Checkpoint, archive.Checkpoint)
	}
	if hook.Paused || !archive.Paused || !st.Paused.IsZero() {
		t.Errorf("paused: hook %v, archive %v, pipeline %v; want archive only", hook.Paused, archive.Paused, st.Paused)
	}
	if hook.Parked.Count != 1 || st.ParkedTotal != 3 || len(st.RecentParked) != 2 {
		t.Errorf("parked: hook %d, total %d, recent %d; want 1, 3 (the removed sink's too), 2", hook.Parked.Count, st.ParkedTotal, len(st.RecentParked))
	}
	if len(hook.Usage) != 1 || hook.Usage[0].Delivered != 9 || len(archive.Usage) != 0 {
		t.Errorf("usage: hook %+v, archive %+v", hook.Usage, archive.Usage)
	}
	if hook.Backlog != nil || st.Leader != nil || st.Standbys != nil || st.Refusal != nil || hook.Failure != nil {
		t.Errorf("read what was not asked for, or a backlog no daemon reported: %+v", st)
	}
}

func TestGatherOperations(t *testing.T) {
	p := fixture(t)
	st, err := Gather(context.Background(), p, Parts{Operations: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.Leader != nil || len(st.Standbys) != 0 || len(st.Streams) != 0 || st.RecentParked != nil {
		t.Errorf("no walcast run leads the pipeline, yet: leader %v, standbys %v, streams %v; recent parked %d", st.Leader, st.Standbys, st.Streams, len(st.RecentParked))
	}
	if len(st.Sinks) != 2 || len(st.Catchups) != 0 || len(st.Backfills) != 0 || len(st.Gaps) != 0 {
		t.Errorf("state %+v", st)
	}
}

// TestGatherKeepsWhatItReadBeforeAnError: the console shows the slot and
// the pause of a pipeline whose later reads fail.
func TestGatherKeepsWhatItReadBeforeAnError(t *testing.T) {
	p := fixture(t)
	ctx := context.Background()
	if _, err := pauses.New(p.DB, p.Name).SetPaused(ctx, "", true); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DB.Exec(ctx, `DROP TABLE walcast.usage`); err != nil {
		t.Fatal(err)
	}
	st, err := Gather(ctx, p, Parts{})
	if err == nil {
		t.Fatal("no error without walcast.usage")
	}
	if !st.Slot.Exists || st.Paused.IsZero() || st.Sinks != nil {
		t.Errorf("after %v: slot %+v, paused %v, sinks %+v; want the slot and the pause, no sinks", err, st.Slot, st.Paused, st.Sinks)
	}
}

// TestReadSlotOnAStandby: status pointed at a standby (after a failover,
// say) reads where the standby has replayed to instead of failing on
// pg_current_wal_lsn, which a server in recovery refuses.
func TestReadSlotOnAStandby(t *testing.T) {
	ctx := context.Background()
	s, err := cluster.Standby(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pool, err := pgxpool.New(ctx, s.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	slot, err := ReadSlot(ctx, pool, "walcast_nowhere")
	if err != nil {
		t.Fatalf("ReadSlot on a standby: %v", err)
	}
	if slot.Exists || slot.Current == 0 {
		t.Errorf("slot %+v, want none and the replayed position", slot)
	}
}
