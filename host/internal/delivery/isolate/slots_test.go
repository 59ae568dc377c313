package isolate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/source/capture"
	"github.com/walcast/walcast/host/pgtest"
)

var cluster *pgtest.Cluster

func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }

func slotExists(t *testing.T, pool *pgxpool.Pool, slot string) bool {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// TestRecoverAfterKills covers what a kill can leave behind: a record
// with its slot (resume from it), a record without its slot (forget it),
// a slot without a record and a slot of a sink no longer configured (drop
// them); the copy starts at the pipeline slot's confirmed position; and
// Teardown leaves nothing.
func TestRecoverAfterKills(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cluster.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	main := fmt.Sprintf("walcast_rec%d", time.Now().UnixNano()%1e9)
	if _, err := pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, main); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		Teardown(context.Background(), pool, "p", main)
		pool.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, main)
	})
	s := NewSlots(pool, "p", main)
	if err := s.Init(ctx); err != nil {
		t.Fatal(err)
	}
	mainConf, err := Confirmed(ctx, pool, main)
	if err != nil {
		t.Fatal(err)
	}
	// resume: recorded and copied.
	slot, conf, err := s.Create(ctx, "resume")
	if err != nil {
		t.Fatal(err)
	}
	if conf != mainConf {
		t.Fatalf("copy confirmed at %X, the pipeline's slot at %X", conf, mainConf)
	}
	// Create again (a kill after the copy, before the detach): reused.
	if again, _, err := s.Create(ctx, "resume"); err != nil || again != slot {
		t.Fatalf("second Create = %s, %v; want %s reused", again, err, slot)
	}
	// forget: recorded, never copied (killed in between).
	if _, err := pool.Exec(ctx, `INSERT INTO walcast.catchup_slots (pipeline, sink, slot) VALUES ('p', 'forget', $1)`, SlotName(main, "forget")); err != nil {
		t.Fatal(err)
	}
	// stray: copied, no record. gone: recorded and copied, sink removed.
	stray := SlotName(main, "stray")
	if _, err := pool.Exec(ctx, `SELECT pg_copy_logical_replication_slot($1, $2)`, main, stray); err != nil {
		t.Fatal(err)
	}
	gone, _, err := s.Create(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}

	// rejoined: copied, then given up and dropped at a rejoin (killed
	// before the record went).
	rejoined, _, err := s.Create(ctx, "rejoined")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE walcast.catchup_slots SET copied = false WHERE sink = 'rejoined'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, rejoined); err != nil {
		t.Fatal(err)
	}
	// dropped: copied, then dropped by hand while its sink needed it.
	dropped, _, err := s.Create(ctx, "dropped")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, dropped); err != nil {
		t.Fatal(err)
	}
	var gaps []string
	gap := func(_ context.Context, reason, sink string) error { gaps = append(gaps, sink+": "+reason); return nil }
	sinks := []string{"resume", "forget", "other", "rejoined", "dropped"}
	_, err = s.Recover(ctx, sinks, nil)
	var lost *capture.GapError
	if !errors.As(err, &lost) || lost.Kind != "catch-up slot lost" || !strings.Contains(err.Error(), "catch-up slot "+dropped+" of sink dropped does not exist") {
		t.Fatalf("Recover with a catch-up slot dropped by hand = %v, want the catch-up slot lost refusal", err)
	}
	if len(gaps) != 0 {
		t.Fatalf("Recover refused but recorded gaps %v", gaps)
	}
	resume, err := s.Recover(ctx, sinks, gap)
	if err != nil {
		t.Fatal(err)
	}
	if len(gaps) != 1 || gaps[0] != "dropped: catch-up slot lost: dropped" {
		t.Fatalf("accepted gaps = %v, want one for sink dropped", gaps)
	}
	if len(resume) != 1 || resume["resume"] != slot {
		t.Fatalf("Recover = %v, want only resume → %s", resume, slot)
	}
	if !slotExists(t, pool, slot) || slotExists(t, pool, stray) || slotExists(t, pool, gone) {
		t.Fatalf("after Recover: %s kept %v, stray %s dropped %v, gone %s dropped %v",
			slot, slotExists(t, pool, slot), stray, !slotExists(t, pool, stray), gone, !slotExists(t, pool, gone))
	}
	sts, err := States(ctx, pool, "p")
	if err != nil {
		t.Fatal(err)
	}
	if len(sts) != 1 || sts[0].Sink != "resume" || sts[0].Mode != "catching_up" {
		t.Fatalf("States = %+v, want only resume catching up", sts)
	}
	if err := Teardown(ctx, pool, "p", main); err != nil {
		t.Fatal(err)
	}
	if slotExists(t, pool, slot) {
		t.Fatal("Teardown left the catch-up slot")
	}
	if sts, _ := States(ctx, pool, "p"); len(sts) != 0 {
		t.Fatalf("Teardown left records: %+v", sts)
	}
}
