package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/pluginlock"
)

// walcastCmd runs the walcast binary TestMain built with args, outside any
// $WALCAST_PLUGIN_DIR so that only --plugin-dir and binDir are searched,
// and returns its stdout, stderr and exit status.
func walcastCmd(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "walcast"), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WALCAST_PLUGIN_DIR=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	case err != nil:
		t.Fatalf("walcast %s: %v", strings.Join(args, " "), err)
	}
	return stdout.String(), stderr.String(), code
}

// buildCustomSink builds examples/customsink, a third-party sink that
// reports the name "batchfiles", into dir under the given file name.
func buildCustomSink(t *testing.T, dir, name string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, "./examples/customsink")
	cmd.Dir = "../.."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build examples/customsink: %v\n%s", err, b)
	}
	return out
}

func readLock(t *testing.T, dir string) *pluginlock.File {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, pluginlock.FileName))
	if err != nil {
		t.Fatal(err)
	}
	var f pluginlock.File
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("lock file: %v\n%s", err, data)
	}
	return &f
}

func wantInstalled(t *testing.T, stdout, sinkType, dir string) {
	t.Helper()
	re := regexp.MustCompile(`^installed ` + regexp.QuoteMeta(sinkType) + ` \S+ sha256:([0-9a-f]{64}) into ` + regexp.QuoteMeta(dir) + "\n$")
	m := re.FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("install printed %q, want %s", stdout, re)
	}
	path := filepath.Join(dir, "walcast-sink-"+sinkType)
	sum, err := pluginlock.FileSHA256(path)
	if err != nil {
		t.Fatal(err)
	}
	if sum != m[1] {
		t.Errorf("install printed sha256 %s, the installed file has %s", m[1], sum)
	}
	e, ok := readLock(t, dir).Plugins[sinkType]
	if !ok || e.SHA256 != sum || e.Version == "" || e.Source == "" || e.InstalledAt.IsZero() {
		t.Errorf("lock entry for %s = %+v (present %v), want sha256 %s and version, source, installed_at set", sinkType, e, ok, sum)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("installed %s: %v, mode %v, want 0755", path, err, fi.Mode())
	}
}

// writeBatchfilesPipeline writes a pipeline whose one sink is the
// customsink example.
func writeBatchfilesPipeline(t *testing.T, dsn string, tables []string) string {
	return writePipeline(t, "plugins", dsn, tables, sinkSpec{
		ID: "archive", SinkType: "batchfiles",
		Config: fmt.Sprintf("    dir = %q\n", t.TempDir()),
	})
}

// TestPluginInstall covers the life of a third-party plugin: install from
// a binary and from a package directory, list, a binary replaced after
// install refused by validate and run, and remove.
func TestPluginInstall(t *testing.T) {
	tmp := t.TempDir()
	built := buildCustomSink(t, tmp, "batchfiles-example")

	t.Run("binary, named by the plugin", func(t *testing.T) {
		dir := t.TempDir()
		stdout, stderr, code := walcastCmd(t, "plugin", "install", built, "--plugin-dir", dir)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		wantInstalled(t, stdout, "batchfiles", dir)
		if src := readLock(t, dir).Plugins["batchfiles"].Source; src != built {
			t.Errorf("lock source = %q, want %q", src, built)
		}
	})

	t.Run("binary, named by its file name or --name", func(t *testing.T) {
		dir := t.TempDir()
		named := buildCustomSink(t, t.TempDir(), "walcast-sink-archive")
		stdout, stderr, code := walcastCmd(t, "plugin", "install", "--plugin-dir", dir, named)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		wantInstalled(t, stdout, "archive", dir)
		stdout, stderr, code = walcastCmd(t, "plugin", "install", built, "--plugin-dir", dir, "--name", "files")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		wantInstalled(t, stdout, "files", dir)
		if n := len(readLock(t, dir).Plugins); n != 2 {
			t.Errorf("lock has %d entries, want 2", n)
		}
	})

	t.Run("not a plugin", func(t *testing.T) {
		dir := t.TempDir()
		fake := filepath.Join(t.TempDir(), "walcast-sink-fake")
		data, err := os.ReadFile("/bin/true")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(fake, data, 0o755); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, code := walcastCmd(t, "plugin", "install", fake, "--plugin-dir", dir)
		if code != 1 || !strings.Contains(stderr, "not a walcast sink plugin") || stdout != "" {
			t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and \"not a walcast sink plugin\"", code, stdout, stderr)
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			t.Errorf("left behind in the plugin directory: %s", e.Name())
		}
	})

	t.Run("package directory, tampered, removed", func(t *testing.T) {
		dir := t.TempDir()
		stdout, stderr, code := walcastCmd(t, "plugin", "install", "../../examples/customsink", "--plugin-dir", dir)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		wantInstalled(t, stdout, "batchfiles", dir)
		installed := filepath.Join(dir, "walcast-sink-batchfiles")

		stdout, stderr, code = walcastCmd(t, "plugin", "list", "--plugin-dir", dir)
		if code != 0 {
			t.Fatalf("list: exit %d: %s", code, stderr)
		}
		version := readLock(t, dir).Plugins["batchfiles"].Version
		if !regexp.MustCompile(`(?m)^batchfiles +` + regexp.QuoteMeta(version) + ` +ok +` + regexp.QuoteMeta(installed) + `$`).MatchString(stdout) {
			t.Errorf("list does not show batchfiles %s ok:\n%s", version, stdout)
		}
		if !regexp.MustCompile(`(?m)^webhook +unlocked +unlocked +\S+/walcast-sink-webhook$`).MatchString(stdout) {
			t.Errorf("list does not show the built-in webhook sink as unlocked:\n%s", stdout)
		}

		pipeline := writeBatchfilesPipeline(t, "postgres://walcast@db.example/shop", []string{"public.orders"})
		if _, stderr, code := walcastCmd(t, "validate", pipeline, "--plugin-dir", dir); code != 0 {
			t.Fatalf("validate with the installed plugin: exit %d: %s", code, stderr)
		}

		// Replace the binary behind walcast's back.
		f, err := os.OpenFile(installed, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte{0}); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}

		stdout, _, code = walcastCmd(t, "plugin", "list", "--plugin-dir", dir)
		if code != 1 || !regexp.MustCompile(`(?m)^batchfiles +\S+ +MISMATCH `).MatchString(stdout) {
			t.Errorf("list after tampering: exit %d, want 1 and MISMATCH:\n%s", code, stdout)
		}
		wantRefused := func(what, stderr string, code int) {
			t.Helper()
			for _, want := range []string{"does not match the checksum recorded in the lock file", "re-run `walcast plugin install`"} {
				if code != 1 || !strings.Contains(stderr, want) {
					t.Errorf("%s after tampering: exit %d, want 1 and %q in:\n%s", what, code, want, tail(stderr, 2000))
				}
			}
		}
		_, stderr, code = walcastCmd(t, "validate", pipeline, "--plugin-dir", dir)
		wantRefused("validate", stderr, code)

		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		dsn, err := cluster.CreateDatabase(ctx, "plugin")
		if err != nil {
			t.Fatal(err)
		}
		exec1(t, connect(t, dsn), "CREATE TABLE orders (id int PRIMARY KEY)")
		runPipeline := writeBatchfilesPipeline(t, dsn, []string{"public.orders"})
		_, stderr, code = walcastCmd(t, "run", runPipeline, "--plugin-dir", dir)
		wantRefused("run", stderr, code)

		stdout, stderr, code = walcastCmd(t, "plugin", "remove", "batchfiles", "--plugin-dir", dir)
		if code != 0 {
			t.Fatalf("remove: exit %d: %s", code, stderr)
		}
		if !strings.HasPrefix(stdout, "removed batchfiles") {
			t.Errorf("remove printed %q", stdout)
		}
		if _, err := os.Stat(installed); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after remove, %s: %v, want it gone", installed, err)
		}
		if _, ok := readLock(t, dir).Plugins["batchfiles"]; ok {
			t.Error("after remove, the lock file still has batchfiles")
		}
		if _, stderr, code := walcastCmd(t, "plugin", "remove", "batchfiles", "--plugin-dir", dir); code != 1 || !strings.Contains(stderr, "not installed") {
			t.Errorf("second remove: exit %d, stderr %q; want 1 and \"not installed\"", code, stderr)
		}
	})

	t.Run("remove refuses what install did not put there", func(t *testing.T) {
		_, stderr, code := walcastCmd(t, "plugin", "remove", "webhook", "--plugin-dir", binDir)
		if code != 1 || !strings.Contains(stderr, "was not installed with `walcast plugin install`") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
		if _, err := os.Stat(filepath.Join(binDir, "walcast-sink-webhook")); err != nil {
			t.Errorf("the built-in webhook plugin: %v", err)
		}
	})
}

func TestPluginUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plugin"}, "Usage:"},
		{[]string{"plugin", "frobnicate"}, `walcast plugin: unknown command "frobnicate"`},
		{[]string{"plugin", "install"}, "walcast plugin install: want exactly one SOURCE argument, got 0 arguments"},
		{[]string{"plugin", "remove", "a", "b"}, "walcast plugin remove: want exactly one TYPE argument, got 2 arguments"},
		{[]string{"plugin", "list", "x"}, "walcast plugin list: want no arguments, got 1 arguments"},
	} {
		_, stderr, code := walcastCmd(t, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("walcast %s: exit %d, stderr %q; want 2 and %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
	_, stderr, code := walcastCmd(t, "plugin", "install", "nosuch/dir", "--plugin-dir", t.TempDir())
	if code != 1 || !strings.Contains(stderr, "no such file or directory") {
		t.Errorf("install of a missing path: exit %d, stderr %q", code, stderr)
	}
}
