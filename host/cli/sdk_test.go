package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The SDK as a product: a sink author outside this repository follows
// docs/writing-a-sink.md, `walcast plugin new` and `walcast plugin test`
// with nothing of the repository but a checkout to point at.

// repoRoot is the checkout the tests run in.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// fencedBlock returns the body of the fenced block of file whose info
// string is exactly info ("sh replace").
func fencedBlock(t *testing.T, file, info string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?ms)^```" + regexp.QuoteMeta(info) + "\n(.*?)^```\n").FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s has no ```%s block", file, info)
	}
	return string(m[1])
}

// sinkAuthorEnv is the environment for go commands run by a test as a user would
// run them: the machine's, with the go command's caches kept where they
// are (a fresh HOME would start them cold) and no workspace of ours.
func sinkAuthorEnv(t *testing.T, home string) []string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPATH").Output()
	if err != nil {
		t.Fatal(err)
	}
	vals := strings.Split(string(out), "\n")
	env := []string{"HOME=" + home, "GOWORK=", "PATH=" + binDir + string(os.PathListSeparator) + os.Getenv("PATH")}
	for i, name := range []string{"GOCACHE", "GOMODCACHE", "GOPATH"} {
		env = append(env, name+"="+vals[i])
	}
	var kept []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "WALCAST_") && !strings.Contains(" HOME GOWORK PATH GOCACHE GOMODCACHE GOPATH ", " "+name+" ") {
			kept = append(kept, kv)
		}
	}
	return append(kept, env...)
}

// runSh runs script with sh -ex in dir.
func runSh(t *testing.T, dir string, env []string, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-ex", "-c", script)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("in %s: %v\n%s", dir, err, out)
	}
	return string(out)
}

// runPipelineUntil runs walcast run on pipeline with plugins from
// pluginDir, calls act once the slot exists, and waits until done holds
// for walcast's output (stdout and stderr).
func runPipelineUntil(t *testing.T, pipeline, pluginDir, dsn, slot string, act func(), what string, done func(out string) bool) {
	t.Helper()
	p := startWalcastCmd(t, runCommand(pluginDir, pipeline))
	defer p.kill()
	waitSlot(t, connect(t, dsn), slot)
	act()
	waitFor(t, what, 2*time.Minute, func() bool { return done(p.logText()) })
}

// TestSinkOutsideRepository follows docs/writing-a-sink.md literally from
// an empty directory outside the repository: its smallest sink, its
// replace recipe and its go work recipe (with /path/to/walcast being this
// checkout), then walcast plugin test, walcast plugin install and a
// pipeline that delivers rows inserted into a real PostgreSQL.
func TestSinkOutsideRepository(t *testing.T) {
	root := repoRoot(t)
	doc := filepath.Join(root, "docs/writing-a-sink.md")
	mainGo := fencedBlock(t, doc, "go main.go")
	recipes := map[string]string{"replace": fencedBlock(t, doc, "sh replace"), "work": fencedBlock(t, doc, "sh work")}

	built := map[string]string{}
	tmp := t.TempDir() // outlives the subtests: install builds the module
	for name, recipe := range recipes {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(tmp, name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(dir, root+string(filepath.Separator)) {
				t.Fatalf("temp dir %s is inside the repository", dir)
			}
			if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(mainGo), 0o644); err != nil {
				t.Fatal(err)
			}
			runSh(t, dir, sinkAuthorEnv(t, t.TempDir()), strings.ReplaceAll(recipe, "/path/to/walcast", root))
			bin := filepath.Join(dir, "walcast-sink-notes")
			stdout, stderr, code := walcastCmd(t, "plugin", "test", bin)
			if code != 0 || !strings.Contains(stdout, "\nok   notes: ") || strings.Contains(stdout, "--- FAIL") {
				t.Fatalf("walcast plugin test: exit %d\n%s%s", code, stdout, stderr)
			}
			built[name] = dir
		})
	}
	dir, ok := built["replace"]
	if !ok {
		t.Fatal("the replace recipe did not build")
	}

	// walcast plugin install builds the module directory with the go
	// command, as docs/operations.md says.
	pluginDir := filepath.Join(t.TempDir(), "plugins")
	stdout, stderr, code := walcastEnvCmd(t, sinkAuthorEnv(t, t.TempDir()), "plugin", "install", dir, "--plugin-dir", pluginDir)
	if code != 0 {
		t.Fatalf("walcast plugin install %s: exit %d\n%s", dir, code, stderr)
	}
	wantInstalled(t, stdout, "notes", pluginDir)

	dsn, db := newSource(t)
	exec1(t, db, "CREATE TABLE orders (id int PRIMARY KEY)")
	pipeline := writePipeline(t, "outsidesink", dsn, []string{"public.orders"}, sinkSpec{ID: "notes", SinkType: "notes", Config: "\n"})
	// The sink's own attributes come back through go-plugin's log relay,
	// which reads them into a map: their order in the line is not its
	// order. Every one of them must be there.
	eventAttrs := []*regexp.Regexp{
		regexp.MustCompile(`(^| )msg=event( |$)`), regexp.MustCompile(` sink=notes( |$)`),
		regexp.MustCompile(` id=\S+:\d+( |$)`), regexp.MustCompile(` table=orders( |$)`), regexp.MustCompile(` op=insert( |$)`),
	}
	events := func(out string) int {
		n := 0
	lines:
		for _, l := range strings.Split(out, "\n") {
			for _, re := range eventAttrs {
				if !re.MatchString(l) {
					continue lines
				}
			}
			n++
		}
		return n
	}
	runPipelineUntil(t, pipeline, pluginDir, dsn, "walcast_outsidesink",
		func() { exec1(t, db, "INSERT INTO orders SELECT generate_series(1, 3)") },
		"the installed sink to log three delivered events",
		func(out string) bool { return events(out) >= 3 })
}

// TestPluginNew makes a skeleton with walcast plugin new outside the
// repository and checks that it passes its own go vet and go test as
// written, that its binary passes walcast plugin test, and that walcast
// plugin test fails it once it is broken.
func TestPluginNew(t *testing.T) {
	root := repoRoot(t)
	dir := filepath.Join(t.TempDir(), "walcast-sink-archive")
	env := sinkAuthorEnv(t, t.TempDir())
	stdout, stderr, code := walcastEnvCmd(t, env, "plugin", "new", "archive", dir, "--walcast-src", root)
	if code != 0 || !strings.Contains(stdout, `created sink "archive" in `+dir) {
		t.Fatalf("walcast plugin new: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, f := range []string{"go.mod", "go.sum", "main.go", "sink.go", "sink_test.go", "README.md"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("the skeleton lacks %s: %v", f, err)
		}
	}
	out := runSh(t, dir, env, "gofmt -l . && go vet ./... && go test -count=1 -v ./... && go build -o walcast-sink-archive .")
	if !strings.Contains(out, "--- PASS: TestConformance ") || strings.Contains(out, "--- FAIL") {
		t.Errorf("the skeleton's tests did not run the conformance suite and pass:\n%s", out)
	}
	cfg := `{"path":"` + filepath.Join(t.TempDir(), "archive.jsonl") + `"}`
	stdout, stderr, code = walcastCmd(t, "plugin", "test", filepath.Join(dir, "walcast-sink-archive"), "--config", cfg)
	if code != 0 || !strings.Contains(stdout, "\nok   archive: 10 passed, 0 failed") {
		t.Fatalf("walcast plugin test of the skeleton: exit %d\n%s%s", code, stdout, stderr)
	}

	// Broken so that it accepts a config without its required attribute:
	// walcast plugin test names the check and exits 1.
	sinkGo := filepath.Join(dir, "sink.go")
	src, err := os.ReadFile(sinkGo)
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(src), `return &pluginkit.ConfigError{Field: "path", Msg: "is required"}`, `c.Path = "/dev/null"`, 1)
	if broken == string(src) {
		t.Fatal("the skeleton no longer checks that path is set")
	}
	if err := os.WriteFile(sinkGo, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	runSh(t, dir, env, "go build -o walcast-sink-archive .")
	stdout, _, code = walcastCmd(t, "plugin", "test", filepath.Join(dir, "walcast-sink-archive"), "--config", cfg)
	if code != 1 || !strings.Contains(stdout, "--- FAIL: Configure/MissingRequired/path ") || !strings.Contains(stdout, "\nFAIL archive: 9 passed, 1 failed") {
		t.Errorf("walcast plugin test of a sink accepting a config without path: exit %d, want 1 and the failing check named:\n%s", code, stdout)
	}

	// Refusals say what to do.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plugin", "new", "archive", dir, "--walcast-src", root}, "already exists and is not empty; pass another DIR"},
		{[]string{"plugin", "new", "Archive Sink", filepath.Join(t.TempDir(), "x"), "--walcast-src", root}, "is not a sink type"},
		{[]string{"plugin", "new", "archive", filepath.Join(t.TempDir(), "x"), "--walcast-src", t.TempDir()}, "is not a checkout of github.com/walcast/walcast"},
		// The walcast under test is built from this checkout, with no
		// pluginkit release to require.
		{[]string{"plugin", "new", "archive", filepath.Join(t.TempDir(), "x")}, "pass --walcast-src DIR"},
	} {
		_, stderr, code := walcastCmd(t, tc.args...)
		if code != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("walcast %s: exit %d, stderr %q; want 1 and %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
}

// TestPluginTestRefuses covers what walcast plugin test says about
// something that is no plugin, or a config that is no JSON object, and
// that a built-in sink passes.
func TestPluginTestRefuses(t *testing.T) {
	stdout, stderr, code := walcastCmd(t, "plugin", "test", filepath.Join(binDir, "walcast-sink-stdout"))
	if code != 0 || !strings.Contains(stdout, "\nok   stdout: ") {
		t.Errorf("walcast plugin test of the stdout sink: exit %d\n%s%s", code, stdout, stderr)
	}
	missing := filepath.Join(t.TempDir(), "walcast-sink-none")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"plugin", "test", "/bin/true"}, 1, "/bin/true is not a walcast sink plugin"},
		{[]string{"plugin", "test", missing}, 1, "does not exist; build the plugin first"},
		{[]string{"plugin", "test", filepath.Join(binDir, "walcast-sink-stdout"), "--config", "[1]"}, 1, "is not a JSON object"},
		{[]string{"plugin", "test"}, 2, "want exactly one PATH argument"},
	} {
		_, stderr, code := walcastCmd(t, tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("walcast %s: exit %d, stderr %q; want %d and %q", strings.Join(tc.args, " "), code, stderr, tc.code, tc.want)
		}
	}
}

// TestPythonSink builds examples/python-sink as its build.sh says, runs
// walcast plugin test on it, installs it and delivers rows inserted into
// a real PostgreSQL through it.
func TestPythonSink(t *testing.T) {
	root := repoRoot(t)
	if _, err := exec.Command("/usr/bin/python3", "-c", "import grpc, grpc_tools, cryptography").CombinedOutput(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("python3-grpcio, python3-grpc-tools or python3-cryptography is missing (make tools installs them): %v", err)
		}
		t.Skip("python3-grpcio, python3-grpc-tools or python3-cryptography is missing: run make tools")
	}
	bin := filepath.Join(t.TempDir(), "walcast-sink-pyfile")
	runSh(t, root, os.Environ(), "examples/python-sink/build.sh "+bin)

	out := filepath.Join(t.TempDir(), "events.jsonl")
	cfg := fmt.Sprintf(`{"path":%q}`, out)
	stdout, stderr, code := walcastCmd(t, "plugin", "test", bin, "--config", cfg)
	if code != 0 || !strings.Contains(stdout, "\nok   pyfile: 10 passed, 0 failed") {
		t.Fatalf("walcast plugin test of the Python sink: exit %d\n%s%s", code, stdout, stderr)
	}

	pluginDir := t.TempDir()
	stdout, stderr, code = walcastCmd(t, "plugin", "install", bin, "--plugin-dir", pluginDir)
	if code != 0 {
		t.Fatalf("walcast plugin install: exit %d\n%s", code, stderr)
	}
	wantInstalled(t, stdout, "pyfile", pluginDir)

	dsn, db := newSource(t)
	exec1(t, db, "CREATE TABLE orders (id int PRIMARY KEY, note text)")
	dest := filepath.Join(t.TempDir(), "pipeline.jsonl")
	pipeline := writePipeline(t, "pythonsink", dsn, []string{"public.orders"},
		sinkSpec{ID: "py", SinkType: "pyfile", Config: fmt.Sprintf("    path = %q\n", dest)})
	if _, stderr, code := walcastCmd(t, "validate", pipeline, "--plugin-dir", pluginDir); code != 0 {
		t.Fatalf("walcast validate: exit %d\n%s", code, stderr)
	}
	var events []map[string]any
	runPipelineUntil(t, pipeline, pluginDir, dsn, "walcast_pythonsink",
		func() {
			exec1(t, db, "INSERT INTO orders SELECT i, 'n' || i FROM generate_series(1, 5) i")
			exec1(t, db, "UPDATE orders SET note = 'changed' WHERE id = 3")
		},
		"six events in the Python sink's file",
		func(string) bool {
			events = readJSONLines(t, dest)
			return len(events) >= 6
		})
	ids := map[string]bool{}
	for i, e := range events {
		if e["table"] != "orders" || ids[fmt.Sprint(e["id"])] {
			t.Errorf("event %d: %v (table orders, unique id expected)", i, e)
		}
		ids[fmt.Sprint(e["id"])] = true
	}
	if last := events[len(events)-1]; last["op"] != "update" || fmt.Sprint(last["new"].(map[string]any)["note"]) != "changed" {
		t.Errorf("last event %v, want the update of row 3", last)
	}
}

func readJSONLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s: a line that is not a JSON envelope: %q", path, sc.Text())
		}
		out = append(out, m)
	}
	return out
}

// TestSDKModuleBoundaries keeps the module layout honest: built-in sinks
// import only pluginkit and proto of this repository, pluginkit's module
// never reaches into the host, and plugin new writes the go directive
// pluginkit's go.mod states.
func TestSDKModuleBoundaries(t *testing.T) {
	root := repoRoot(t)
	list := func(dir string, args ...string) []string {
		cmd := exec.Command("go", append([]string{"list", "-deps"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s in %s: %v", strings.Join(args, " "), dir, err)
		}
		return strings.Fields(string(out))
	}
	for _, dep := range list(root, "./plugins/...") {
		if strings.HasPrefix(dep, "github.com/walcast/walcast/") && !strings.HasPrefix(dep, "github.com/walcast/walcast/plugins/") &&
			!strings.HasPrefix(dep, "github.com/walcast/walcast/pluginkit") && !strings.HasPrefix(dep, "github.com/walcast/walcast/proto/") {
			t.Errorf("a built-in sink depends on %s; plugins import only pluginkit and proto", dep)
		}
	}
	for _, dep := range list(filepath.Join(root, "pluginkit"), "./...") {
		if strings.HasPrefix(dep, "github.com/walcast/walcast/host") || strings.HasPrefix(dep, "github.com/walcast/walcast/plugins") {
			t.Errorf("pluginkit depends on %s", dep)
		}
	}
	mod, err := os.ReadFile(filepath.Join(root, "pluginkit/go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod); m == nil || string(m[1]) != skeletonGoVersion {
		t.Errorf("pluginkit/go.mod says %q, walcast plugin new writes go %s", regexp.MustCompile(`(?m)^go .*$`).Find(mod), skeletonGoVersion)
	}
}
