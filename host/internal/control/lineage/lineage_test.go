package lineage

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/control/schema"
)

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
