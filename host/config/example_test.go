package config

import (
	"testing"
)

// TestPipelineExample keeps the annotated example at the repository root
// valid, without a warning, and in step with the defaults it documents.
func TestPipelineExample(t *testing.T) {
	t.Setenv("WALCAST_SOURCE_DSN", "postgres://walcast@localhost/shop")
	p, diags := Load("../../pipeline.hcl.example")
	if len(diags) != 0 {
		t.Fatalf("pipeline.hcl.example:\n%s", FormatDiagnostics(diags))
	}
	if p.Source.DSN != "postgres://walcast@localhost/shop" {
		t.Errorf("DSN = %q, want it from WALCAST_SOURCE_DSN", p.Source.DSN)
	}
	if len(p.Sinks) != 2 || p.Sinks[0].Type != "stdout" || p.Sinks[1].Type != "webhook" {
		t.Fatalf("want a stdout and a webhook sink, got %+v", p.Sinks)
	}
	// The webhook sink writes out every default; they must be the defaults.
	if got := withoutRanges(p.Sinks[1].Delivery); got != DefaultDelivery() {
		t.Errorf("webhook delivery %+v is not DefaultDelivery() %+v", got, DefaultDelivery())
	}
	if p.Source.Slot != defaultSlotName(p.Name) || p.Source.Publication != defaultSlotName(p.Name) {
		t.Errorf("slot %q and publication %q are documented as the defaults", p.Source.Slot, p.Source.Publication)
	}
}
