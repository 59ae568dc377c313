package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestCustomSinkReadme does what examples/customsink/README.md tells a
// sink author to do, with the commands and files copied from it: install
// the sink with walcast plugin install into $WALCAST_PLUGIN_DIR, list it,
// validate the README's pipeline, and get the error it shows for a
// relative dir. What every sink must do is docs/writing-a-sink.md's,
// which TestSinkOutsideRepository follows; the README points there.
func TestCustomSinkReadme(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "examples/customsink/README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	section := func(title string) string {
		i := strings.Index(readme, "\n## "+title+"\n")
		if i < 0 {
			t.Fatalf("README has no section %q", title)
		}
		rest := readme[i+len(title)+5:]
		if j := strings.Index(rest, "\n## "); j >= 0 {
			rest = rest[:j]
		}
		return rest
	}
	block := func(text, lang string) string {
		m := regexp.MustCompile("(?s)```" + lang + "\n(.*?)```").FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no ```%s block in:\n%s", lang, text)
		}
		return m[1]
	}

	// Install, as the README says, from the repository root, with a
	// fresh HOME: the plugin directory does not exist yet.
	home := t.TempDir()
	install := block(section("Install"), "sh")
	if strings.Contains(install, "cp ") || !strings.Contains(install, "walcast plugin install") {
		t.Fatalf("the README installs without walcast plugin install:\n%s", install)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "sh", "-ex", "-c", install)
	sh.Dir = root
	sh.Env = append(os.Environ(), "HOME="+home, "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	// The go command's caches default to places under HOME; keep the
	// machine's, or the build starts cold (and may need the network).
	goEnv, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPATH").Output()
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"GOCACHE", "GOMODCACHE", "GOPATH"} {
		sh.Env = append(sh.Env, name+"="+strings.Split(string(goEnv), "\n")[i])
	}
	var out bytes.Buffer
	sh.Stdout, sh.Stderr = &out, &out
	if err := sh.Run(); err != nil {
		t.Fatalf("the README's install commands: %v\n%s", err, out.String())
	}
	pluginDir := filepath.Join(home, ".local/lib/walcast")
	installed := filepath.Join(pluginDir, "walcast-sink-batchfiles")
	if !regexp.MustCompile(`(?m)^installed batchfiles \S+ sha256:[0-9a-f]{64} into ` + regexp.QuoteMeta(pluginDir) + `$`).MatchString(out.String()) {
		t.Errorf("install output differs from what the README says:\n%s", out.String())
	}
	if !regexp.MustCompile(`(?m)^batchfiles +\S+ +ok +` + regexp.QuoteMeta(installed) + `$`).MatchString(out.String()) {
		t.Errorf("walcast plugin list does not show batchfiles ok:\n%s", out.String())
	}

	// The README's pipeline validates against the installed plugin.
	use := section("Use it in a pipeline")
	pipeline := filepath.Join(t.TempDir(), "pipeline.hcl")
	hcl := block(use, "hcl")
	env := []string{"WALCAST_PLUGIN_DIR=" + pluginDir, "WALCAST_SOURCE_DSN=postgres://walcast@db.example/shop"}
	if err := os.WriteFile(pipeline, []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	if stdout, stderr, code := walcastEnvCmd(t, env, "validate", pipeline); code != 0 {
		t.Errorf("walcast validate on the README's pipeline: exit %d\n%s%s", code, stdout, stderr)
	}
	// With dir = "archive", the error the README shows.
	validate := use[strings.Index(use, "walcast validate"):]
	want := regexp.MustCompile(`(?m)^# (pipeline\.hcl:.*)$`).FindStringSubmatch(validate)
	if want == nil {
		t.Fatalf("no error shown after walcast validate:\n%s", validate)
	}
	relative := regexp.MustCompile(`dir( +)= "[^"]*"`).ReplaceAllString(hcl, `dir$1= "archive"`)
	if err := os.WriteFile(pipeline, []byte(relative), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := walcastEnvCmd(t, env, "validate", pipeline)
	if code != 1 || !strings.Contains(stderr, filepath.Dir(pipeline)+"/"+want[1]+"\n") {
		t.Errorf("walcast validate with dir = \"archive\": exit %d, stderr:\n%s\nwant the README's line %q", code, stderr, want[1])
	}

}
