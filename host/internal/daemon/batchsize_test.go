package daemon

import (
	"testing"

	"github.com/walcast/walcast/host/internal/config"
	"github.com/walcast/walcast/pluginkit"
)

// A plugin's own batch size applies only where the pipeline set none.
func TestBatchSize(t *testing.T) {
	load := func(delivery string) config.Delivery {
		t.Helper()
		src := `pipeline = "p"
source "postgres" {
  dsn    = "postgres://localhost/db"
  tables = ["public.t"]
}
sink "stdout" "out" {
` + delivery + `
}
`
		p, diags := config.Parse([]byte(src), "p.hcl")
		if diags.HasErrors() {
			t.Fatalf("parse: %s", config.FormatDiagnostics(diags))
		}
		return p.Sinks[0].Delivery
	}
	defaulted := load("")
	set := load("  delivery {\n    batch_size = 50\n  }")
	tests := []struct {
		name string
		d    config.Delivery
		info pluginkit.Info
		want int
	}{
		{"host default", defaulted, pluginkit.Info{}, config.DefaultBatchSize},
		{"plugin's", defaulted, pluginkit.Info{BatchSize: 1000}, 1000},
		{"plugin's, bounded", defaulted, pluginkit.Info{BatchSize: 1 << 20}, config.MaxBatchSize},
		{"pipeline's wins", set, pluginkit.Info{BatchSize: 1000}, 50},
		{"pipeline's", set, pluginkit.Info{}, 50},
	}
	for _, tt := range tests {
		if got := BatchSize(tt.d, tt.info); got != tt.want {
			t.Errorf("%s: BatchSize = %d, want %d", tt.name, got, tt.want)
		}
	}
	if got := ScheduleConfig(&config.Sink{Delivery: defaulted}, pluginkit.Info{BatchSize: 1000}).BatchSize; got != 1000 {
		t.Errorf("ScheduleConfig BatchSize = %d, want the plugin's 1000", got)
	}
}
