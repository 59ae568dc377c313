package config

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/walcast/walcast/pluginkit"
)

// fakePlugins knows a few sink types and rejects some configs the way a
// real plugin's Configure would.
type fakePlugins struct {
	mu      sync.Mutex
	checked map[string]string // sink type -> last config checked
}

func (f *fakePlugins) Describe(ctx context.Context, sinkType string) (pluginkit.Info, error) {
	switch sinkType {
	case "webhook":
		return pluginkit.Info{Name: "webhook", Config: []pluginkit.ConfigField{
			{Name: "url", Type: pluginkit.TypeString, Required: true},
			{Name: "timeout", Type: pluginkit.TypeDuration},
		}}, nil
	case "kafka":
		return pluginkit.Info{Name: "kafka", Ordered: true, Config: []pluginkit.ConfigField{
			{Name: "brokers", Type: pluginkit.TypeStringList, Required: true},
		}}, nil
	}
	return pluginkit.Info{}, fmt.Errorf("no plugin walcast-sink-%s in the plugin directory", sinkType)
}

func (f *fakePlugins) CheckConfig(ctx context.Context, sinkType string, tables []string, config json.RawMessage) error {
	f.mu.Lock()
	if f.checked == nil {
		f.checked = map[string]string{}
	}
	f.checked[sinkType] = string(config)
	f.mu.Unlock()

	var c struct {
		URL     string   `json:"url"`
		Brokers []string `json:"brokers"`
	}
	if err := json.Unmarshal(config, &c); err != nil {
		return err
	}
	switch {
	case strings.HasPrefix(c.URL, "ftp:"):
		// Wrapped, as a plugin client might: Check must still find it.
		return fmt.Errorf("configure: %w", &pluginkit.ConfigError{Field: "url", Msg: "scheme must be http or https"})
	case strings.Contains(c.URL, "crash"):
		return errors.New("plugin exited during Configure")
	}
	return nil
}

const checkPipeline = `pipeline = "shop"

source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders"]
}

sink "webhook" "billing" {
  config {
    timeout = "10s"
    url     = "ftp://billing.example.com/hooks"
  }
}

sink "nosuch" "mystery" {
}

sink "kafka" "events" {
  delivery {
    max_in_flight = 4
  }
  config {
    brokers = ["localhost:9092"]
  }
}

sink "webhook" "crashy" {
  config {
    url = "http://crash.example.com"
  }
}

sink "webhook" "incomplete" {
  config {
    timeout = "soon"
  }
}
`

func TestCheck(t *testing.T) {
	p, diags := parse([]byte(checkPipeline), "shop.hcl", testEnv)
	if len(diags) != 0 {
		t.Fatal(FormatDiagnostics(diags))
	}
	plugins := &fakePlugins{}
	got := FormatDiagnostics(Check(t.Context(), p, plugins))
	want := `shop.hcl:11:15: error: Invalid config for sink "billing": url: scheme must be http or https
shop.hcl:15:6: error: Unavailable sink plugin: Sink "mystery": cannot load plugin "nosuch": no plugin walcast-sink-nosuch in the plugin directory.
shop.hcl:20:21: warning: max_in_flight has no effect: The kafka plugin delivers in order: sink "events" gets one batch at a time in commit order, so max_in_flight = 4 is ignored; set ordering = "strict" to say so.
shop.hcl:28:3: error: Invalid config for sink "crashy": plugin exited during Configure
shop.hcl:34:10: error: Missing required argument: The argument "url" is required, but no definition was found.
shop.hcl:35:15: error: Invalid duration: bad duration "soon": invalid duration "soon"; write a number and a unit, such as "30s", "2m" or "1h30m".
`
	if got != want {
		t.Errorf("diagnostics:\n%s\nwant:\n%s", got, want)
	}

	// What the plugins were handed; "incomplete" never reached its plugin.
	if c := plugins.checked["kafka"]; c != `{"brokers":["localhost:9092"]}` {
		t.Errorf("kafka config = %s", c)
	}
	if c := plugins.checked["webhook"]; c != `{"url":"http://crash.example.com"}` {
		t.Errorf("last webhook config = %s", c)
	}
}

func TestCheckStopsWhenContextEnds(t *testing.T) {
	p, _ := parse([]byte(checkPipeline), "shop.hcl", testEnv)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	plugins := &fakePlugins{}
	if diags := Check(ctx, p, plugins); len(diags) != 0 || plugins.checked != nil {
		t.Errorf("after cancel: %s, checked %v", FormatDiagnostics(diags), plugins.checked)
	}
}

func TestCheckNoWarningForDefaults(t *testing.T) {
	// An ordered plugin with the default max_in_flight: nothing to say.
	src := strings.Replace(checkPipeline, "    max_in_flight = 4\n", "", 1)
	p, _ := parse([]byte(src), "shop.hcl", testEnv)
	p.Sinks = p.Sinks[2:3] // kafka only
	if diags := Check(t.Context(), p, &fakePlugins{}); len(diags) != 0 {
		t.Errorf("got %s", FormatDiagnostics(diags))
	}
}
