package checkpoints

import (
	"context"
	"testing"

	"github.com/walcast/walcast/host/internal/control/schema"
	"github.com/walcast/walcast/pluginkit/cdc"
)

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
