package config

import (
	"slices"
	"testing"
)

// TestPipelineExample keeps the annotated example at the repository root
// valid, without a warning, and in step with the defaults it documents.
func TestPipelineExample(t *testing.T) {
	t.Setenv("WALCAST_SOURCE_DSN", "postgres://walcast@localhost/shop")
	p, diags := Load("../../../pipeline.hcl.example")
	if len(diags) != 0 {
		t.Fatalf("pipeline.hcl.example:\n%s", FormatDiagnostics(diags))
	}
	if p.Source.DSN != "postgres://walcast@localhost/shop" {
		t.Errorf("DSN = %q, want it from WALCAST_SOURCE_DSN", p.Source.DSN)
	}
	var types []string
	for _, s := range p.Sinks {
		types = append(types, s.Type)
	}
	if !slices.Equal(types, []string{"stdout", "webhook", "grpc", "sse"}) {
		t.Fatalf("want stdout, webhook, grpc and sse sinks, got %v", types)
	}
	if p.Sinks[3].Durable {
		t.Error("the sse sink is durable; it never should be by default")
	}
	// The webhook sink writes out every default; they must be the defaults.
	if got := withoutRanges(p.Sinks[1].Delivery); got != DefaultDelivery() {
		t.Errorf("webhook delivery %+v is not DefaultDelivery() %+v", got, DefaultDelivery())
	}
	if p.Source.Slot != defaultSlotName(p.Name) || p.Source.Publication != defaultSlotName(p.Name) {
		t.Errorf("slot %q and publication %q are documented as the defaults", p.Source.Slot, p.Source.Publication)
	}
}
