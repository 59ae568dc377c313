package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/walcast/walcast/pluginkit"
)

// FuzzParse checks that no input makes Parse panic and that every
// diagnostic it returns can be printed as FILE:LINE:COL.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*.hcl")
	bad, _ := filepath.Glob("testdata/bad/*.hcl")
	for _, name := range append(append(seeds, bad...), "../../../pipeline.hcl.example") {
		src, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	f.Add([]byte(`sink "a" {}`))
	f.Add([]byte(`source {}`))
	f.Add([]byte("pipeline = env(env(\"X\"))\nsource \"postgres\" \"extra\" {}"))

	f.Fuzz(func(t *testing.T, src []byte) {
		p, diags := parse(src, "fuzz.hcl", testEnv)
		if p == nil && !diags.HasErrors() {
			t.Fatal("nil pipeline without an error")
		}
		for _, d := range diags {
			if d.Subject == nil {
				t.Fatalf("diagnostic without a subject: %s: %s", d.Summary, d.Detail)
			}
			if d.Subject.Filename != "fuzz.hcl" || d.Subject.Start.Line < 1 || d.Subject.Start.Column < 1 {
				t.Fatalf("diagnostic with an empty range %#v: %s: %s", d.Subject, d.Summary, d.Detail)
			}
		}
		if p == nil {
			return
		}
		// A partial pipeline must be safe to hand on, as Check does.
		for _, s := range p.Sinks {
			_, _ = DecodeSinkConfig(s.Config, fakeFields)
			_ = ConfigErrorDiag(s.Config, s.ConfigRange, &pluginkit.ConfigError{Field: "url", Msg: "bad"}, s.ID)
		}
	})
}
