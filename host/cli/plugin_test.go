package cli

import (
	"archive/zip"
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/plugin/pluginlock"
)

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

	t.Run("binary, named by the plugin, into a new directory", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "opt", "plugins")
		stdout, stderr, code := walcastCmd(t, "plugin", "install", built, "--plugin-dir", dir)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		wantInstalled(t, stdout, "batchfiles", dir)
		if src := readLock(t, dir).Plugins["batchfiles"].Source; src != built {
			t.Errorf("lock source = %q, want %q", src, built)
		}
	})

	t.Run("into $WALCAST_PLUGIN_DIR, created when missing", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "plugins")
		env := []string{"WALCAST_PLUGIN_DIR=" + dir}
		stdout, stderr, code := walcastEnvCmd(t, env, "plugin", "install", built)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		wantInstalled(t, stdout, "batchfiles", dir)
		stdout, stderr, code = walcastEnvCmd(t, env, "plugin", "list")
		if code != 0 || !regexp.MustCompile(`(?m)^batchfiles +\S+ +ok +`+regexp.QuoteMeta(filepath.Join(dir, "walcast-sink-batchfiles"))+`$`).MatchString(stdout) {
			t.Errorf("list with $WALCAST_PLUGIN_DIR: exit %d, stderr %q:\n%s", code, stderr, stdout)
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
		if !strings.HasPrefix(stdout, "TYPE ") || !regexp.MustCompile(`^TYPE +VERSION +CHECKSUM +PATH\n`).MatchString(stdout) {
			t.Errorf("list header, want TYPE VERSION CHECKSUM PATH:\n%s", stdout)
		}
		// An unlocked plugin's version comes from its build information,
		// in its own column; the checksum column says it is unlocked.
		bi, err := buildinfo.ReadFile(filepath.Join(binDir, "walcast-sink-webhook"))
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`(?m)^webhook +` + regexp.QuoteMeta(bi.Main.Version) + ` +unlocked +\S+/walcast-sink-webhook$`).MatchString(stdout) {
			t.Errorf("list does not show the built-in webhook sink's version %s and unlocked:\n%s", bi.Main.Version, stdout)
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
		{[]string{"plugin", "install"}, "walcast plugin install: want exactly one SOURCE argument, got 0"},
		{[]string{"plugin", "remove", "a", "b"}, "walcast plugin remove: want exactly one TYPE argument, got 2"},
		{[]string{"plugin", "list", "x"}, "walcast plugin list: want no arguments, got 1"},
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

// notesSink is the source of a third-party sink module, example.com/sink:
// a sink of type "notes" that appends each event id to a file.
const notesSink = `package main

import (
	"context"
	"encoding/json"
	"os"

	"github.com/walcast/walcast/pluginkit"
)

type notes struct{ path string }

func (n *notes) Info() pluginkit.Info {
	return pluginkit.Info{Name: "notes", Version: pluginkit.BuildVersion(), Config: []pluginkit.ConfigField{
		{Name: "path", Type: pluginkit.TypeString, Required: true, Doc: "file the event ids are appended to"},
	}}
}

func (n *notes) Configure(_ context.Context, raw json.RawMessage) error {
	var c struct {
		Path string ` + "`json:\"path\"`" + `
	}
	if err := pluginkit.DecodeConfig(raw, &c); err != nil {
		return err
	}
	n.path = c.Path
	return nil
}

func (n *notes) Open(context.Context) (pluginkit.OpenResult, error) { return pluginkit.OpenResult{}, nil }

func (n *notes) Deliver(_ context.Context, evs []pluginkit.Event) (pluginkit.DeliverResult, error) {
	f, err := os.OpenFile(n.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return pluginkit.DeliverResult{}, err
	}
	for _, e := range evs {
		if _, err := f.WriteString(e.ID.String() + "\n"); err != nil {
			f.Close()
			return pluginkit.DeliverResult{}, err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return pluginkit.DeliverResult{}, err
	}
	return pluginkit.DeliverResult{}, f.Close()
}

func (n *notes) Close(context.Context) error { return nil }

func main() { pluginkit.Serve(&notes{}) }
`

// walcastCheckoutVersion is the version under which the module proxy of
// TestPluginInstallModule serves this checkout's SDK modules: the one
// they require each other at in the checkout, where replace directives
// stand in for a release.
const walcastCheckoutVersion = "v0.0.0-00010101000000-000000000000"

// goProxy is a Go module proxy in a directory, served to the go command as
// GOPROXY=file://DIR: <module>/@v/list, <version>.info, .mod and .zip.
type goProxy struct {
	t   *testing.T
	dir string
}

// add publishes module@version with the given files (paths relative to
// the module root; go.mod among them).
func (p goProxy) add(module, version string, files map[string][]byte) {
	p.t.Helper()
	if strings.ToLower(module) != module {
		p.t.Fatalf("module path %s: upper case needs !-escaping, which this proxy does not do", module)
	}
	dir := filepath.Join(p.dir, filepath.FromSlash(module), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		w, err := zw.Create(module + "@" + version + "/" + name)
		if err == nil {
			_, err = w.Write(files[name])
		}
		if err != nil {
			p.t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		p.t.Fatal(err)
	}
	info := fmt.Sprintf(`{"Version":%q,"Time":"2026-01-01T00:00:00Z"}`, version)
	for ext, data := range map[string][]byte{".info": []byte(info), ".mod": files["go.mod"], ".zip": buf.Bytes()} {
		if err := os.WriteFile(filepath.Join(dir, version+ext), data, 0o644); err != nil {
			p.t.Fatal(err)
		}
	}
	list, err := os.OpenFile(filepath.Join(dir, "list"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = fmt.Fprintln(list, version)
		if cerr := list.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		p.t.Fatal(err)
	}
}

// sdkModules are the modules of this repository a sink requires, by
// their directory (longest first, so that pluginkit/cdc is not taken for
// part of pluginkit).
var sdkModules = []struct{ dir, path string }{
	{"pluginkit/cdc/", "github.com/walcast/walcast/pluginkit/cdc"},
	{"pluginkit/", "github.com/walcast/walcast/pluginkit"},
	{"proto/", "github.com/walcast/walcast/proto"},
}

// checkoutSDK returns the files of this checkout's SDK modules, by module
// path, relative to each module's root: what their release zips would
// hold.
func checkoutSDK(t *testing.T) map[string]map[string][]byte {
	t.Helper()
	mods := map[string]map[string][]byte{}
	for name, data := range checkoutFiles(t) {
		for _, m := range sdkModules {
			if rel, ok := strings.CutPrefix(name, m.dir); ok {
				if mods[m.path] == nil {
					mods[m.path] = map[string][]byte{}
				}
				mods[m.path][rel] = data
				break
			}
		}
	}
	return mods
}

// checkoutFiles returns this checkout's files as git sees them (tracked
// or new, not ignored).
func checkoutFiles(t *testing.T) map[string][]byte {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files (the test packs this checkout as a module): %v", err)
	}
	files := map[string][]byte{}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		data, err := os.ReadFile(filepath.Join(root, name))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the work tree
		}
		if err != nil {
			t.Fatal(err)
		}
		files[name] = data
	}
	return files
}

// goEnv returns `go env NAME`.
func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

// TestPluginInstallModule installs a third-party sink the way its users
// would, `walcast plugin install example.com/sink@v1.0.0`, with no
// network: a module proxy in a directory serves example.com/sink (which
// requires github.com/walcast/walcast/pluginkit, as after a release) and
// this checkout's SDK modules (pluginkit, pluginkit/cdc, proto); every
// other module comes from the local
// module cache's download directory, itself a module proxy. A fresh
// GOMODCACHE keeps the test's fake versions out of the user's cache.
// The plugin is built, locked with its module version and SHA-256, and
// then checks a pipeline's config in `walcast validate` and delivers in
// `walcast run`.
func TestPluginInstallModule(t *testing.T) {
	tmp := t.TempDir()
	proxy := goProxy{t: t, dir: filepath.Join(tmp, "proxy")}
	realCache := filepath.Join(goEnv(t, "GOMODCACHE"), "cache", "download")
	env := []string{
		"GOPROXY=file://" + proxy.dir + ",file://" + realCache,
		"GOMODCACHE=" + filepath.Join(tmp, "modcache"),
		"GOSUMDB=off", // the fake modules have no checksum database entry
		"GOTOOLCHAIN=local",
		"GOWORK=off",
		// -modcacherw lets t.TempDir remove the module cache; -trimpath
		// keeps compiled packages cacheable across runs despite the fresh
		// module cache directory.
		"GOFLAGS=-modcacherw -trimpath " + os.Getenv("GOFLAGS"),
	}

	for path, files := range checkoutSDK(t) {
		proxy.add(path, walcastCheckoutVersion, files)
	}

	// The sink's author publishes its go.mod and go.sum.
	src := filepath.Join(tmp, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	goMod := "module example.com/sink\n\ngo 1.22\n\nrequire github.com/walcast/walcast/pluginkit " + walcastCheckoutVersion + "\n"
	for name, data := range map[string]string{"go.mod": goMod, "main.go": notesSink} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A build with -mod=mod records what the sink needs in go.mod and
	// go.sum. (go mod tidy would also want the test dependencies of every
	// dependency, which the local module cache does not hold.)
	build := exec.Command("go", "build", "-mod=mod", "-o", os.DevNull, ".")
	build.Dir = src
	build.Env = append(os.Environ(), env...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -mod=mod in the sink module: %v\n%s", err, out)
	}
	sinkFiles := map[string][]byte{}
	for _, name := range []string{"go.mod", "go.sum", "main.go"} {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		sinkFiles[name] = data
	}
	proxy.add("example.com/sink", "v1.0.0", sinkFiles)

	install := func(dir, arg string) (string, string, int) {
		return walcastEnvCmd(t, env, "plugin", "install", arg, "--plugin-dir", dir)
	}
	dir := t.TempDir()
	start := time.Now()
	stdout, stderr, code := install(dir, "example.com/sink@v1.0.0")
	if code != 0 {
		t.Fatalf("walcast plugin install example.com/sink@v1.0.0: exit %d\n%s", code, stderr)
	}
	t.Logf("installed in %s: %s", time.Since(start).Round(time.Millisecond), stdout)
	wantInstalled(t, stdout, "notes", dir)
	e := readLock(t, dir).Plugins["notes"]
	if e.Version != "v1.0.0" || e.Source != "example.com/sink@v1.0.0" {
		t.Errorf("lock entry %+v, want version v1.0.0 and source example.com/sink@v1.0.0", e)
	}

	// A query is resolved: the lock says which version was built. (And a
	// GOFLAGS=-mod=mod in the user's environment does not get in the way.)
	latest := t.TempDir()
	stdout, stderr, code = walcastEnvCmd(t, append(env, "GOFLAGS=-mod=mod -modcacherw -trimpath"), "plugin", "install", "example.com/sink@latest", "--plugin-dir", latest)
	if code != 0 {
		t.Fatalf("walcast plugin install example.com/sink@latest: exit %d\n%s", code, stderr)
	}
	wantInstalled(t, stdout, "notes", latest)
	if e := readLock(t, latest).Plugins["notes"]; e.Source != "example.com/sink@v1.0.0" || e.Version != "v1.0.0" {
		t.Errorf("lock entry after installing @latest: %+v, want source example.com/sink@v1.0.0", e)
	}

	// A version the proxy does not have fails with the go command's word.
	_, stderr, code = install(t.TempDir(), "example.com/sink@v9.9.9")
	if code != 1 || !strings.Contains(stderr, "go install example.com/sink@v9.9.9") {
		t.Errorf("install of a missing version: exit %d, stderr:\n%s", code, stderr)
	}

	// The installed plugin checks its config block...
	out := filepath.Join(t.TempDir(), "notes.txt")
	dsn, db := newSource(t)
	exec1(t, db, "CREATE TABLE orders (id int PRIMARY KEY)")
	pipeline := writePipeline(t, "pluginmodule", dsn, []string{"public.orders"}, sinkSpec{
		ID: "notes", SinkType: "notes", Config: fmt.Sprintf("    path = %q\n", out)})
	if _, stderr, code := walcastCmd(t, "validate", pipeline, "--plugin-dir", dir); code != 0 {
		t.Fatalf("validate with the installed plugin: exit %d: %s", code, stderr)
	}
	bad := writePipeline(t, "pluginmodulebad", dsn, []string{"public.orders"}, sinkSpec{
		ID: "notes", SinkType: "notes", Config: "    file = \"x\"\n"})
	if _, stderr, code := walcastCmd(t, "validate", bad, "--plugin-dir", dir); code == 0 || !strings.Contains(stderr, "path") {
		t.Errorf("validate of a config without path: exit %d: %s", code, stderr)
	}

	// ...and delivers.
	p := startWalcastCmd(t, runCommand(dir, pipeline))
	defer p.kill()
	waitSlot(t, db, "walcast_pluginmodule")
	exec1(t, db, "INSERT INTO orders VALUES (1), (2)")
	waitFor(t, "the notes sink to write two event ids", time.Minute, func() bool {
		b, _ := os.ReadFile(out)
		return strings.Count(string(b), "\n") >= 2
	})
}
