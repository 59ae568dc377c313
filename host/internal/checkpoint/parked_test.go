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
