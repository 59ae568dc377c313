package host_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host"
)

// TestRetire: a library stream's slot, the publications Open created
// and its rows in the walcast schema are what Retire drops, and all it
// reports; it refuses while the stream is open; a second Retire finds
// nothing; a publication Open found is left alone.
func TestRetire(t *testing.T) {
	dsn, db := setup(t)
	ctx := context.Background()
	slot := slotName("retire")
	cfg := host.StreamConfig{DSN: dsn, Tables: []string{"public.items"}, Slot: slot}
	s, err := host.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	execT(t, db, `INSERT INTO items VALUES (1, 'a')`)
	ack(t, s, next(t, s).ID)

	if _, err := host.Retire(ctx, cfg); !errors.Is(err, host.ErrSlotInUse) {
		t.Fatalf("Retire of an open stream: %v, want ErrSlotInUse", err)
	}
	if n := count(t, db, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot); n != 1 {
		t.Fatal("a refused Retire dropped the slot")
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the slot released", 30*time.Second, func() bool {
		return count(t, db, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active`, slot) == 0
	})

	r, err := host.Retire(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Slot != slot || !slices.Equal(r.Publications, []string{slot, slot + "_keyless"}) || !r.Recorded {
		t.Errorf("Retire = %+v, want slot %s, publications %s and %s_keyless, recorded", r, slot, slot, slot)
	}
	for what, q := range map[string]string{
		"slot":         `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`,
		"publications": `SELECT count(*) FROM pg_publication WHERE pubname IN ($1::text, $1::text || '_keyless')`,
		"rows":         `SELECT (SELECT count(*) FROM walcast.pipelines WHERE pipeline = 'library:' || $1::text) + (SELECT count(*) FROM walcast.checkpoints WHERE pipeline = 'library:' || $1::text)`,
	} {
		if n := count(t, db, q, slot); n != 0 {
			t.Errorf("after Retire the %s of the stream are still there (%d)", what, n)
		}
	}
	if r, err := host.Retire(ctx, cfg); err != nil || r.Slot != "" || r.Publications != nil || r.Recorded {
		t.Errorf("second Retire = %+v, %v; want nothing removed and no error", r, err)
	}

	// A publication the stream did not create survives its retirement.
	execT(t, db, `CREATE PUBLICATION mine FOR TABLE items`)
	other := slotName("retire_mine")
	cfg2 := host.StreamConfig{DSN: dsn, Tables: []string{"public.items"}, Slot: other, Publication: "mine"}
	s2, err := host.Open(ctx, cfg2)
	if err != nil {
		t.Fatal(err)
	}
	s2.Close(ctx)
	if r, err := host.Retire(ctx, cfg2); err != nil || r.Slot != other || len(r.Publications) != 0 {
		t.Errorf("Retire of a stream on a publication it found = %+v, %v; want its slot only", r, err)
	}
	if count(t, db, `SELECT count(*) FROM pg_publication WHERE pubname = 'mine'`) != 1 {
		t.Error("Retire dropped a publication the stream did not create")
	}
}

func count(t *testing.T, db *pgx.Conn, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}
