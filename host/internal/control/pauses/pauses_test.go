package pauses

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/control/schema"
)

func TestPauses(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cluster.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	shop, other := New(pool, "shop"), New(pool, "other")
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	set := func(s *Store, sink string, paused, wantChanged bool) {
		t.Helper()
		changed, err := s.SetPaused(ctx, sink, paused)
		if err != nil || changed != wantChanged {
			t.Fatalf("SetPaused(%q, %v) = %v, %v; want changed %v", sink, paused, changed, err, wantChanged)
		}
	}
	paused := func(s *Store, sink string) bool {
		t.Helper()
		p, err := s.LoadPauses(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, ok := p.Paused(sink)
		return ok
	}
	set(shop, "a", true, true)
	set(shop, "a", true, false)
	if !paused(shop, "a") || paused(shop, "b") || paused(other, "a") {
		t.Fatal("pausing shop's sink a paused something else, or not a")
	}
	set(shop, "", true, true)
	if !paused(shop, "b") {
		t.Fatal("a pipeline pause does not cover every sink")
	}
	set(shop, "", false, true) // resumes the pipeline and sink a
	if paused(shop, "a") || paused(shop, "b") {
		t.Fatal("resuming the pipeline left a sink paused")
	}
	set(shop, "b", false, false)
	set(shop, "b", true, true)
	if err := schema.Forget(ctx, pool, "shop"); err != nil {
		t.Fatal(err)
	}
	if paused(shop, "b") {
		t.Fatal("Forget kept a pause")
	}
}
