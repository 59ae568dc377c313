package checkpoint

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/control/schema"
	"github.com/walcast/walcast/host/pgtest"
	"github.com/walcast/walcast/pluginkit/cdc"
)

var cluster *pgtest.Cluster

func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }

// initStore returns an initialised store of pipeline in a database of its
// own, and the pool it uses (closed when the test ends).
func initStore(t *testing.T, pipeline string) (*Store, *pgxpool.Pool) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), cluster.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := New(pool, pipeline)
	if err := schema.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return s, pool
}

func TestSaveNeverMovesBackwards(t *testing.T) {
	ctx := context.Background()
	s, pool := initStore(t, "shop")
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate is not idempotent: %v", err)
	}
	hi := cdc.MustParseEventID("0/1A:3")
	if err := s.Save(ctx, map[string]cdc.EventID{"a": hi, "b": cdc.MustParseEventID("0/A:0")}); err != nil {
		t.Fatal(err)
	}
	// "0/A:9" is lower than "0/1A:3" although it sorts higher as a string.
	if err := s.Save(ctx, map[string]cdc.EventID{"a": cdc.MustParseEventID("0/A:9"), "b": cdc.MustParseEventID("0/B:1")}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got["a"] != hi || got["b"] != cdc.MustParseEventID("0/B:1") {
		t.Fatalf("checkpoints = %v", got)
	}
	other, err := New(pool, "other").Load(ctx)
	if err != nil || len(other) != 0 {
		t.Fatalf("other pipeline sees %v, %v", other, err)
	}
	if err := schema.Forget(ctx, pool, "shop"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Load(ctx); len(got) != 0 {
		t.Fatalf("after Forget: %v", got)
	}
}

func TestPipelineRecord(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cluster.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := New(pool, "shop")
	if _, ok, err := s.LoadPipeline(ctx); ok || err != nil {
		t.Fatalf("before Migrate: ok=%v err=%v", ok, err)
	}
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordPipeline(ctx, Pipeline{Slot: "s", Publication: "p", CreatedPublication: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordPipeline(ctx, Pipeline{Slot: "s", Publication: "p"}); err != nil {
		t.Fatal(err)
	}
	p, ok, err := s.LoadPipeline(ctx)
	if err != nil || !ok || !p.CreatedPublication {
		t.Fatalf("pipeline = %+v ok=%v err=%v", p, ok, err)
	}
}
