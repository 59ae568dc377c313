package config

import (
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/walcast/walcast/pluginkit"
)

// fakeFields declares one attribute of every type.
var fakeFields = []pluginkit.ConfigField{
	{Name: "url", Type: pluginkit.TypeString, Required: true},
	{Name: "secret", Type: pluginkit.TypeString},
	{Name: "retries", Type: pluginkit.TypeNumber},
	{Name: "verify", Type: pluginkit.TypeBool},
	{Name: "topics", Type: pluginkit.TypeStringList},
	{Name: "headers", Type: pluginkit.TypeStringMap},
	{Name: "timeout", Type: pluginkit.TypeDuration},
}

// configBody parses src as the body of a config block starting on line 1:
// "config {" is line 1, so attribute lines are 2 onwards.
func configBody(t *testing.T, src string) (hcl.Body, hcl.Range) {
	t.Helper()
	f, diags := hclparse.NewParser().ParseHCL([]byte(src), "p.hcl")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	content, diags := f.Body.Content(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "config"}}})
	if diags.HasErrors() || len(content.Blocks) != 1 {
		t.Fatalf("want one config block: %v", diags)
	}
	return content.Blocks[0].Body, content.Blocks[0].DefRange
}

func TestDecodeSinkConfig(t *testing.T) {
	tests := []struct {
		name     string
		src      string
		wantJSON string
		wantDiag string
	}{{
		name: "every type",
		src: `config {
  url     = "http://127.0.0.1:9000/hooks"
  retries = 3
  verify  = true
  topics  = ["a", "b"]
  headers = { "X-Team" = "billing" }
  timeout = "5s"
}`,
		// secret is unset and left out, so the plugin's default applies.
		wantJSON: `{"headers":{"X-Team":"billing"},"retries":3,"timeout":"5s","topics":["a","b"],"url":"http://127.0.0.1:9000/hooks","verify":true}`,
	}, {
		name: "env",
		src: `config {
  url    = "http://x"
  secret = env("WALCAST_TEST_DSN")
}`,
		wantJSON: `{"secret":"postgres://walcast@localhost/shop","url":"http://x"}`,
	}, {
		name: "HCL conversions",
		src: `config {
  url     = "http://x"
  retries = "4"
}`,
		wantJSON: `{"retries":4,"url":"http://x"}`,
	}, {
		name: "unknown attribute",
		src: `config {
  url = "http://x"
  uri = "http://y"
}`,
		wantDiag: `p.hcl:3:3: error: Unsupported argument: An argument named "uri" is not expected here; accepted: headers, retries, secret, timeout, topics, url, verify.`,
	}, {
		name:     "missing required",
		src:      "config {\n  retries = 1\n}",
		wantDiag: `p.hcl:1:8: error: Missing required argument: The argument "url" is required, but no definition was found.`,
	}, {
		name: "bad duration",
		src: `config {
  url     = "http://x"
  timeout = "3x"
}`,
		wantDiag: `p.hcl:3:13: error: Invalid duration: bad duration "3x": unknown unit "x" in duration "3x"; write a number and a unit, such as "30s", "2m" or "1h30m".`,
	}, {
		name: "wrong type",
		src: `config {
  url    = "http://x"
  verify = "sometimes"
}`,
		wantDiag: `p.hcl:3:12: error: Incorrect attribute value type: Inappropriate value for attribute "verify": a bool is required.`,
	}, {
		name: "nested block",
		src: `config {
  url = "http://x"
  tls {
  }
}`,
		wantDiag: `p.hcl:3:3: error: Unexpected "tls" block: Blocks are not allowed here.`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, _ := configBody(t, tt.src)
			raw, diags := decodeSinkConfig(body, fakeFields, newEvalContext(testEnv))
			if got := strings.TrimSuffix(FormatDiagnostics(diags), "\n"); got != tt.wantDiag {
				t.Errorf("diagnostics:\n%s\nwant:\n%s", got, tt.wantDiag)
			}
			if string(raw) != tt.wantJSON {
				t.Errorf("JSON = %s\nwant   %s", raw, tt.wantJSON)
			}
		})
	}
}

func TestDecodeSinkConfigAbsentBlock(t *testing.T) {
	// The sink has no config block: a missing required attribute points at
	// the sink header.
	header := hcl.Range{Filename: "p.hcl", Start: hcl.Pos{Line: 7, Column: 1, Byte: 60}, End: hcl.Pos{Line: 7, Column: 25, Byte: 84}}
	_, diags := DecodeSinkConfig(emptyBodyAt(header), fakeFields)
	want := `p.hcl:7:1: error: Missing required argument: The argument "url" is required, but no definition was found.` + "\n"
	if got := FormatDiagnostics(diags); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}

	raw, diags := DecodeSinkConfig(emptyBodyAt(header), nil)
	if diags.HasErrors() || string(raw) != "{}" {
		t.Errorf("no fields, no block: got %s, %v; want {}", raw, diags)
	}
}

func TestDecodeSinkConfigNoFields(t *testing.T) {
	body, _ := configBody(t, "config {\n  url = \"x\"\n}")
	_, diags := DecodeSinkConfig(body, nil)
	want := `p.hcl:2:3: error: Unsupported argument: An argument named "url" is not expected here; this sink accepts no attributes.` + "\n"
	if got := FormatDiagnostics(diags); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestDecodeSinkConfigBadPluginSchema(t *testing.T) {
	body, _ := configBody(t, "config {\n}")
	_, diags := DecodeSinkConfig(body, []pluginkit.ConfigField{{Name: "when", Type: "time"}})
	want := `p.hcl:1:8: error: Unsupported config field type: The plugin declares attribute "when" with type "time", which walcast does not support; this is a bug in the plugin.` + "\n"
	if got := FormatDiagnostics(diags); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestConfigErrorDiag(t *testing.T) {
	body, block := configBody(t, `config {
  url     = "ftp://x"
  headers = { "A" = "b" }
}`)
	tests := []struct {
		field string
		want  string
	}{
		{"url", `p.hcl:2:13: error: Invalid config for sink "billing": url: scheme must be http or https`},
		{"headers.A", `p.hcl:3:13: error: Invalid config for sink "billing": headers.A: scheme must be http or https`},
		{"secret", `p.hcl:1:1: error: Invalid config for sink "billing": secret: scheme must be http or https`},
		{"", `p.hcl:1:1: error: Invalid config for sink "billing": scheme must be http or https`},
	}
	for _, tt := range tests {
		d := ConfigErrorDiag(body, block, &pluginkit.ConfigError{Field: tt.field, Msg: "scheme must be http or https"}, "billing")
		if got := strings.TrimSuffix(FormatDiagnostics(hcl.Diagnostics{d}), "\n"); got != tt.want {
			t.Errorf("field %q:\ngot  %s\nwant %s", tt.field, got, tt.want)
		}
	}
}
