package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/walcast/walcast/host/internal/delivery/outbox"
	"github.com/walcast/walcast/pluginkit"
)

// testEnv is the environment the testdata files are parsed in.
func testEnv(name string) (string, bool) {
	v, ok := map[string]string{
		"WALCAST_TEST_DSN":   "postgres://walcast@localhost/shop",
		"WALCAST_TEST_EMPTY": "",
	}[name]
	return v, ok
}

// TestParseBad runs every testdata/bad/*.hcl file: its "# want: " comment
// lines are the exact FormatDiagnostics output, one line per diagnostic.
// The comments sit at the end so that they do not move the positions.
func TestParseBad(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.hcl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".hcl"), func(t *testing.T) {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var want strings.Builder
			for line := range strings.Lines(string(src)) {
				if rest, ok := strings.CutPrefix(line, "# want: "); ok {
					want.WriteString(rest)
				}
			}
			if want.Len() == 0 {
				t.Fatal("no # want: lines")
			}

			_, diags := parse(src, filepath.Base(file), testEnv)
			if got := FormatDiagnostics(diags); got != want.String() {
				t.Errorf("diagnostics:\n%s\nwant:\n%s", got, want.String())
			}
		})
	}
}

func TestParseSyntaxErrorGivesNoPipeline(t *testing.T) {
	p, diags := parse([]byte("pipeline = \n"), "x.hcl", testEnv)
	if p != nil || !diags.HasErrors() {
		t.Fatalf("got pipeline %v, diags %v; want nil and errors", p, diags)
	}
}

func TestParseGood(t *testing.T) {
	p := mustParseFile(t, "testdata/good.hcl")

	if p.Name != "shop" {
		t.Errorf("Name = %q", p.Name)
	}
	src := p.Source
	wantSrc := Source{
		Type:         "postgres",
		DSN:          "postgres://walcast@localhost/shop",
		Tables:       []string{"public.orders", "public.customers", "billing.invoices"},
		Slot:         "shop_slot",
		Publication:  "shop_pub",
		AllowKeyless: true,
	}
	if src.Type != wantSrc.Type || src.DSN != wantSrc.DSN || !reflect.DeepEqual(src.Tables, wantSrc.Tables) ||
		src.Slot != wantSrc.Slot || src.Publication != wantSrc.Publication || src.AllowKeyless != wantSrc.AllowKeyless {
		t.Errorf("Source = %+v\nwant %+v", src, wantSrc)
	}
	if src.ReceiveTimeout != 90*time.Second {
		t.Errorf("ReceiveTimeout = %s, want 90s", src.ReceiveTimeout)
	}
	if got := rangeStrings(src.TableRanges); !reflect.DeepEqual(got, []string{"6:20", "6:37", "6:57"}) {
		t.Errorf("TableRanges = %v", got)
	}

	if len(p.Sinks) != 2 {
		t.Fatalf("got %d sinks, want 2", len(p.Sinks))
	}
	billing, debug := p.Sinks[0], p.Sinks[1]

	if billing.Type != "webhook" || billing.ID != "billing" || billing.Durable ||
		!reflect.DeepEqual(billing.Tables, []string{"public.orders", "billing.invoices"}) ||
		!reflect.DeepEqual(billing.Ops, []pluginkit.Op{pluginkit.OpInsert, pluginkit.OpUpdate}) {
		t.Errorf("billing = %+v", billing)
	}
	wantDelivery := Delivery{
		BatchSize:      500,
		RateLimit:      2.5,
		Ordering:       OrderingStrict,
		MaxInFlight:    1,
		RetryBase:      10 * time.Second,
		MaxAttempts:    3,
		DeliverTimeout: 45 * time.Second,
		DetachAfter:    DefaultDetachAfter,
		ThrottleMin:    250 * time.Millisecond,
		ThrottleMax:    2 * time.Minute,
	}
	if got := withoutRanges(billing.Delivery); got != wantDelivery {
		t.Errorf("billing delivery = %+v\nwant %+v", got, wantDelivery)
	}
	if got := rangeString(billing.ConfigRange); got != "27:3" {
		t.Errorf("billing ConfigRange at %s, want the config header at 27:3", got)
	}
	if got := rangeString(billing.IDRange); got != "12:16" {
		t.Errorf("billing IDRange at %s", got)
	}

	// Every default.
	if debug.Type != "stdout" || debug.ID != "debug" || !debug.Durable || debug.Tables != nil || debug.Ops != nil {
		t.Errorf("debug = %+v", debug)
	}
	wantDefaults := Delivery{
		BatchSize:      100,
		RateLimit:      0,
		Ordering:       "row",
		MaxInFlight:    8,
		RetryBase:      30 * time.Second,
		MaxAttempts:    5,
		DeliverTimeout: 2 * time.Minute,
		DetachAfter:    200 * time.Millisecond,
		ThrottleMin:    time.Second,
		ThrottleMax:    10 * time.Minute,
	}
	if debug.Delivery != wantDefaults {
		t.Errorf("debug delivery = %+v\nwant %+v", debug.Delivery, wantDefaults)
	}
	if got := rangeString(debug.ConfigRange); got != "32:1" {
		t.Errorf("debug ConfigRange at %s, want the sink header at 32:1", got)
	}
	attrs, diags := debug.Config.JustAttributes()
	if len(attrs) != 0 || diags.HasErrors() {
		t.Errorf("absent config block: got %v, %v; want an empty body", attrs, diags)
	}
}

func TestDefaultSlotAndPublication(t *testing.T) {
	p, diags := parse([]byte(`
pipeline = "shop_eu"
source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders"]
  slot   = "custom"
}
`), "x.hcl", testEnv)
	if diags.HasErrors() {
		t.Fatal(FormatDiagnostics(diags))
	}
	if p.Source.Slot != "custom" || p.Source.Publication != "walcast_shop_eu" {
		t.Errorf("slot %q, publication %q", p.Source.Slot, p.Source.Publication)
	}
}

// TestOnDetachValues: each value of on_detach is taken as written, and
// leaving it out is "delete".
func TestOnDetachValues(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{"", OnDetachDelete},
		{`on_detach = "delete"`, OnDetachDelete},
		{`on_detach = "event"`, OnDetachEvent},
		{`on_detach = "ignore"`, OnDetachIgnore},
	} {
		p, diags := parse([]byte(`
pipeline = "shop"
source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders"]
  `+tc.line+`
}
`), "x.hcl", testEnv)
		if diags.HasErrors() {
			t.Fatalf("%s: %s", tc.line, FormatDiagnostics(diags))
		}
		if p.Source.OnDetach != tc.want {
			t.Errorf("%q: on_detach %q, want %q", tc.line, p.Source.OnDetach, tc.want)
		}
	}
}

func TestEnv(t *testing.T) {
	const file = `
pipeline = "shop"
source "postgres" {
  dsn    = env("WALCAST_TEST_PARSE_DSN")
  tables = ["public.orders"]
}
`
	t.Run("set", func(t *testing.T) {
		t.Setenv("WALCAST_TEST_PARSE_DSN", "postgres://from-env/shop")
		p, diags := Parse([]byte(file), "x.hcl")
		if len(diags) != 0 {
			t.Fatal(FormatDiagnostics(diags))
		}
		if p.Source.DSN != "postgres://from-env/shop" {
			t.Errorf("DSN = %q", p.Source.DSN)
		}
	})
	t.Run("unset", func(t *testing.T) {
		t.Setenv("WALCAST_TEST_PARSE_DSN", "")
		os.Unsetenv("WALCAST_TEST_PARSE_DSN") // t.Setenv restores it
		_, diags := Parse([]byte(file), "x.hcl")
		want := `x.hcl:4:12: error: Error in function call: Call to function "env" failed: environment variable WALCAST_TEST_PARSE_DSN is not set.` + "\n"
		if got := FormatDiagnostics(diags); got != want {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	})
	t.Run("wrong argument", func(t *testing.T) {
		_, diags := parse([]byte(strings.Replace(file, `env("WALCAST_TEST_PARSE_DSN")`, `env(["A"])`, 1)), "x.hcl", testEnv)
		got := FormatDiagnostics(diags)
		if !strings.HasPrefix(got, `x.hcl:4:16: error: Invalid function argument: Invalid value for "name" parameter: string required`) {
			t.Errorf("got %s", got)
		}
	})
}

func TestLoadMissingFile(t *testing.T) {
	p, diags := Load(filepath.Join(t.TempDir(), "nope.hcl"))
	if p != nil || len(diags) != 1 {
		t.Fatalf("got %v, %v", p, diags)
	}
	if got := FormatDiagnostics(diags); !strings.HasPrefix(got, "error: Cannot read pipeline file: open ") {
		t.Errorf("got %q", got)
	}
}

func mustParseFile(t *testing.T, name string) *Pipeline {
	t.Helper()
	src, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	p, diags := parse(src, name, testEnv)
	if len(diags) > 0 {
		t.Fatalf("unexpected diagnostics:\n%s", FormatDiagnostics(diags))
	}
	return p
}

func withoutRanges(d Delivery) Delivery {
	d.MaxInFlightRange = nil
	d.BatchSizeRange = nil
	return d
}

// rangeString is LINE:COL of r's start.
func rangeString(r hcl.Range) string {
	return fmt.Sprintf("%d:%d", r.Start.Line, r.Start.Column)
}

func rangeStrings(rs []hcl.Range) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = rangeString(r)
	}
	return out
}

func TestSinkEnv(t *testing.T) {
	const file = `
pipeline = "shop"
source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders"]
}
sink "kafka" "k" {
  env = { KAFKA_PASSWORD = "pw", %s = "x" }
}
`
	p, diags := parse(fmt.Appendf(nil, file, "SSL_KEY_FILE"), "x.hcl", testEnv)
	if diags.HasErrors() {
		t.Fatal(FormatDiagnostics(diags))
	}
	if env := p.Sinks[0].Env; len(env) != 2 || env["KAFKA_PASSWORD"] != "pw" {
		t.Errorf("env = %v", env)
	}
	_, diags = parse(fmt.Appendf(nil, file, `"1BAD"`), "x.hcl", testEnv)
	if got := FormatDiagnostics(diags); !strings.Contains(got, `x.hcl:8:9: error: Invalid environment variable name: "1BAD"`) {
		t.Errorf("got %s", got)
	}
}

func TestSinkFormat(t *testing.T) {
	const file = `
pipeline = "shop"
source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders"]
}
sink "kafka" "plain" {}
sink "kafka" "dbz" { format = "debezium" }
sink "kafka" "dbz2" {
  format = "debezium"
  debezium {
    name                  = "dbserver1"
    schemas               = true
    decimal_handling_mode = "string"
  }
}
`
	p, diags := parse([]byte(file), "x.hcl", testEnv)
	if diags.HasErrors() {
		t.Fatal(FormatDiagnostics(diags))
	}
	want := []struct {
		format string
		dz     Debezium
	}{
		{FormatWalcast, Debezium{}},
		{FormatDebezium, Debezium{Name: "shop", DecimalHandling: DecimalPrecise}},
		{FormatDebezium, Debezium{Name: "dbserver1", Schemas: true, DecimalHandling: DecimalString}},
	}
	for i, w := range want {
		if s := p.Sinks[i]; s.Format != w.format || s.Debezium != w.dz {
			t.Errorf("sink %s: format %q %+v, want %q %+v", s.ID, s.Format, s.Debezium, w.format, w.dz)
		}
	}
}

// An outbox block decodes into the spec with Debezium's defaults for what
// it leaves out, and a router the scheduler applies.
func TestSinkOutbox(t *testing.T) {
	src := `pipeline = "shop"
source "postgres" {
  dsn    = "postgres://localhost/shop"
  tables = ["public.orders", "app.outbox"]
}
sink "kafka" "defaults" {
  outbox { table = "app.outbox" }
}
sink "webhook" "named" {
  outbox {
    table          = "app.outbox"
    id_column      = "event_id"
    key_column     = "agg_id"
    route_column   = "agg_type"
    payload_column = "body"
    type_column    = "kind"
    route_prefix   = ""
  }
}
sink "kafka" "none" {}
`
	p, diags := parse([]byte(src), "outbox.hcl", testEnv)
	if diags.HasErrors() {
		t.Fatal(FormatDiagnostics(diags))
	}
	d := p.Sinks[0].Outbox
	if d == nil || d.Router == nil || d.Spec != outbox.Defaults("app.outbox") || d.RoutePrefix != "outbox.event." {
		t.Fatalf("defaults: %+v", d)
	}
	want := outbox.Spec{Table: "app.outbox", IDColumn: "event_id", KeyColumn: "agg_id", RouteColumn: "agg_type",
		PayloadColumn: "body", TypeColumn: "kind", RoutePrefix: ""}
	if n := p.Sinks[1].Outbox; n == nil || n.Spec != want || n.Router == nil || n.Places["key_column"].Start.Line != 13 {
		t.Fatalf("named: %+v", n)
	}
	if p.Sinks[2].Outbox != nil || p.Sinks[2].OutboxRouter() != nil {
		t.Fatal("a sink without an outbox block has one")
	}
}
