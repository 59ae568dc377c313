package checkpoint

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/pluginkit/cdc"
)

func TestParkListUnpark(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cluster.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := New(pool, "shop")
	if err := s.Init(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ev := func(id string) cdc.Event {
		return cdc.Event{ID: cdc.MustParseEventID(id), Schema: "public", Table: "t", Op: cdc.OpUpdate,
			Key: []byte(`{"id":1}`), Payload: []byte(`{"x":1}`)}
	}
	ps := []Parked{
		{Sink: "hook", Event: ev("0/1A:0"), Row: "r1", Attempts: 5, LastError: "boom", FirstFailure: now, LastFailure: now},
		{Sink: "hook", Event: ev("0/A:3"), Row: "r1", LastError: "behind", FirstFailure: now, LastFailure: now},
	}
	if err := s.Park(ctx, ps); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListParked(ctx, "hook", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Event.ID != cdc.MustParseEventID("0/A:3") || string(got[1].Event.Payload) != `{"x":1}` {
		t.Fatalf("listed %+v", got)
	}
	if rows, _ := s.ParkedRows(ctx, "hook"); len(rows) != 1 || rows[0] != "r1" {
		t.Fatalf("rows %v", rows)
	}
	if n, _ := s.CountParked(ctx); n != 2 {
		t.Fatalf("count %d", n)
	}
	if err := s.Unpark(ctx, "hook", []cdc.EventID{got[0].Event.ID}); err != nil {
		t.Fatal(err)
	}
	if row, _ := s.ParkedRowOf(ctx, "hook", cdc.MustParseEventID("0/1A:0")); row != "r1" {
		t.Fatalf("row of parked event: %q", row)
	}
	if err := s.RequestReplay(ctx, ReplayRequest{Sink: "hook"}); err != nil {
		t.Fatal(err)
	}
	reqs, err := s.TakeReplayRequests(ctx)
	if err != nil || len(reqs) != 1 || reqs[0].Sink != "hook" {
		t.Fatalf("requests %v %v", reqs, err)
	}
	if err := s.AddUsage(ctx, []Usage{{Sink: "hook", Hour: now.Truncate(time.Hour), Attempts: 2, Delivered: 10, Bytes: 100}}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddUsage(ctx, []Usage{{Sink: "hook", Hour: now.Truncate(time.Hour), Attempts: 1, Failed: 1}}); err != nil {
		t.Fatal(err)
	}
	us, err := s.LoadUsage(ctx)
	if err != nil || len(us) != 1 || us[0].Attempts != 3 || us[0].Delivered != 10 || us[0].Failed != 1 {
		t.Fatalf("usage %+v %v", us, err)
	}
}

// An update that changed the key is parked under both rows: both count as
// parked, and listing either row finds it. Init also upgrades a table made
// before old_row_key existed.
func TestParkedKeyChangeBelongsToBothRows(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cluster.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := New(pool, "shop")
	if err := s.Init(ctx); err != nil {
		t.Fatal(err)
	}
	// A table made by an older walcast, then Init again.
	if _, err := pool.Exec(ctx, `ALTER TABLE walcast.parked DROP COLUMN old_row_key`); err != nil {
		t.Fatal(err)
	}
	if err := s.Init(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ev := cdc.Event{ID: cdc.MustParseEventID("0/1B:0"), Schema: "public", Table: "t", Op: cdc.OpUpdate, Key: []byte(`{"id":2}`), Payload: []byte(`{}`)}
	if err := s.Park(ctx, []Parked{{Sink: "hook", Event: ev, Row: "new", OldRow: "old", LastError: "x", FirstFailure: now, LastFailure: now}}); err != nil {
		t.Fatal(err)
	}
	rows, err := s.ParkedRows(ctx, "hook")
	if err != nil || len(rows) != 2 {
		t.Fatalf("parked rows %v (%v), want old and new", rows, err)
	}
	for _, r := range []string{"old", "new"} {
		got, err := s.ListParked(ctx, "hook", r)
		if err != nil || len(got) != 1 || got[0].Row != "new" || got[0].OldRow != "old" {
			t.Fatalf("row %s: listed %+v (%v)", r, got, err)
		}
	}
}
