package parking

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/control/schema"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// parkedBatch is n events of one sink, each a row of its own, with a
// payload of a few hundred bytes.
func parkedBatch(sink string, n int) []Event {
	now := time.Now()
	ps := make([]Event, n)
	for i := range ps {
		ps[i] = Event{Sink: sink, Row: fmt.Sprintf(`public.t{"id":%d}`, i), Attempts: 5, LastError: "boom", FirstFailure: now, LastFailure: now,
			Event: cdc.Event{ID: cdc.EventID{CommitLSN: 0x1000 + uint64(i/10)*0x100, Index: uint64(i % 10)}, Schema: "public", Table: "t", Op: cdc.OpInsert,
				Key: fmt.Appendf(nil, `{"id":%d}`, i), Payload: fmt.Appendf(nil, `{"id":%d,"pad":"%0300d"}`, i, i)}}
	}
	return ps
}

// TestParkKillMidWriteLeavesAllOrNone parks a large batch while a trigger
// slows every row down, and cuts the write short once a few hundred rows
// went in: by cancelling the call, and by terminating its backend. Either
// way walcast.parked must hold all of the batch or none of it: a part on
// record would make a restarted scheduler park some of a row's events and
// deliver the others.
func TestParkKillMidWriteLeavesAllOrNone(t *testing.T) {
	ctx := context.Background()
	dsn := cluster.Database(t)
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(context.Background()) })
	if err := schema.Migrate(ctx, admin); err != nil {
		t.Fatal(err)
	}
	// The sequence is not transactional: it shows how far a write got even
	// while its rows are invisible to other sessions.
	for _, sql := range []string{
		`CREATE SEQUENCE park_progress`,
		`CREATE FUNCTION slow_park() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM nextval('park_progress'); PERFORM pg_sleep(0.002); RETURN NEW; END $$`,
		`CREATE TRIGGER slow_park BEFORE INSERT ON walcast.parked FOR EACH ROW EXECUTE FUNCTION slow_park()`,
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	const n = 2000
	const cutAfter = 300
	progress := func() int64 {
		var v int64
		if err := admin.QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM park_progress`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	parked := func(sink string) int {
		var c int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM walcast.parked WHERE sink = $1`, sink).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, how := range []string{"cancel", "kill"} {
		t.Run(how, func(t *testing.T) {
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			s := New(conn, "shop")
			start := progress()
			pctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- s.Park(pctx, parkedBatch(how, n)) }()
			deadline := time.Now().Add(2 * time.Minute)
			for progress()-start < cutAfter {
				select {
				case err := <-done:
					t.Fatalf("Park returned (%v) before the test could cut it short", err)
				default:
				}
				if time.Now().After(deadline) {
					t.Fatal("the write did not get going within 2 minutes")
				}
				time.Sleep(5 * time.Millisecond)
			}
			switch how {
			case "cancel":
				cancel()
			case "kill":
				if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, conn.PgConn().PID()); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case err := <-done:
				if err == nil {
					t.Fatalf("Park reported success after being cut short at row %d of %d", progress()-start, n)
				}
			case <-time.After(2 * time.Minute):
				t.Fatal("Park did not return within 2 minutes of being cut short")
			}
			if got := parked(how); got != 0 && got != n {
				t.Fatalf("after a %s mid-write (%d rows in), walcast.parked holds %d of the %d events: want all or none", how, cutAfter, got, n)
			}
		})
	}
	// Uncut, the same write parks every event; an event listed twice is
	// recorded once, and parking it again counts its attempts.
	if _, err := admin.Exec(ctx, `DROP TRIGGER slow_park ON walcast.parked`); err != nil {
		t.Fatal(err)
	}
	s := New(admin, "shop")
	ps := parkedBatch("whole", n)
	ps = append(ps, ps[7])
	if err := s.Park(ctx, ps); err != nil {
		t.Fatal(err)
	}
	if got := parked("whole"); got != n {
		t.Fatalf("parked %d events, want %d", got, n)
	}
	if err := s.Park(ctx, ps[7:8]); err != nil {
		t.Fatal(err)
	}
	var attempts int
	if err := admin.QueryRow(ctx, `SELECT attempts FROM walcast.parked WHERE sink = 'whole' AND event_id = $1`, ps[7].Event.ID.String()).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts != 10 {
		t.Fatalf("an event parked twice has %d attempts, want 10", attempts)
	}
}
