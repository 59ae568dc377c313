package reports

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/control/schema"
)

// TestReportStreams: what the daemon reports of its streams reads back per
// slot, a later report replaces the earlier one, Forget removes it, and a
// database walcast never used reads as no report at all.
func TestReportStreams(t *testing.T) {
	ctx := context.Background()
	s, pool := initStore(t, "shop")
	last := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := s.ReportStreams(ctx, []Stream{
		{Slot: "walcast_shop", Streaming: true, ReceiveTimeout: 4 * time.Second, ReceiveTimeouts: 2, LastReceiveTimeout: last},
		{Slot: "walcast_shop_hook", Streaming: false, ReceiveTimeout: 4 * time.Second},
	}); err != nil {
		t.Fatal(err)
	}
	got, now, err := s.LoadStreams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	main, cu := got["walcast_shop"], got["walcast_shop_hook"]
	if !main.Streaming || main.ReceiveTimeout != 4*time.Second || main.ReceiveTimeouts != 2 || !main.LastReceiveTimeout.Equal(last) || !main.FreshAt(now) {
		t.Errorf("pipeline stream = %+v (now %s)", main, now)
	}
	if cu.Streaming || cu.ReceiveTimeouts != 0 || !cu.LastReceiveTimeout.IsZero() {
		t.Errorf("catch-up stream = %+v", cu)
	}
	if err := s.ReportStreams(ctx, []Stream{{Slot: "walcast_shop", Streaming: false, ReceiveTimeout: time.Second, ReceiveTimeouts: 3, LastReceiveTimeout: last.Add(time.Minute)}}); err != nil {
		t.Fatal(err)
	}
	got, _, _ = s.LoadStreams(ctx)
	if m := got["walcast_shop"]; m.Streaming || m.ReceiveTimeouts != 3 || m.ReceiveTimeout != time.Second {
		t.Errorf("after a second report: %+v", m)
	}
	if other, _, err := New(pool, "other").LoadStreams(ctx); err != nil || len(other) != 0 {
		t.Errorf("other pipeline sees %v, %v", other, err)
	}
	if err := schema.Forget(ctx, pool, "shop"); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := s.LoadStreams(ctx); len(got) != 0 {
		t.Errorf("after Forget: %v", got)
	}

	bare, err := pgxpool.New(ctx, cluster.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	if got, _, err := New(bare, "shop").LoadStreams(ctx); err != nil || len(got) != 0 {
		t.Errorf("without the walcast schema: %v, %v", got, err)
	}
}
