package cli

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSystemdUnitsRunGettingStarted keeps examples/systemd/ working with
// the pipeline getting-started.md ships: each unit passes systemd's own
// checker (systemd-analyze verify), reads its secrets from the
// EnvironmentFile that walcast.env documents, which defines every
// variable the getting-started pipeline reads with env(); and
// walcast@.service's command line, run as systemd would run it (only the
// variables of that file in its environment), streams that pipeline and
// stops cleanly on the unit's KillSignal.
func TestSystemdUnitsRunGettingStarted(t *testing.T) {
	analyze := needSystemdAnalyze(t)
	units, _ := filepath.Glob("../../examples/systemd/*.service")
	if len(units) < 2 {
		t.Fatalf("examples/systemd has %d units", len(units))
	}
	etc := t.TempDir() // stands for /etc/walcast
	for _, u := range units {
		text := readFile(t, u)
		wantAll(t, text, "\nEnvironmentFile=/etc/walcast/walcast.env\n", "\nUser=walcast\n")
		// Verified as installed: the instance named, walcast where the
		// unit says, here the binary under test.
		installed := strings.ReplaceAll(strings.ReplaceAll(text, "/usr/local/bin/walcast", filepath.Join(binDir, "walcast")), "/etc/walcast", etc)
		name := strings.Replace(filepath.Base(u), "@.", "@1.", 1)
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, []byte(installed), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(analyze, "verify", path).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "" {
			t.Errorf("systemd-analyze verify %s: %v\n%s", filepath.Base(u), err, out)
		}
	}

	// The env file defines what the getting-started pipeline reads.
	var pipeline string
	for _, b := range docBlocks(t) {
		if b.file == "getting-started.md" && b.lang == "hcl" {
			pipeline = b.text
		}
	}
	env := envFile(t, "../../examples/systemd/walcast.env")
	for _, m := range envCall.FindAllStringSubmatch(pipeline, -1) {
		if _, ok := env[m[1]]; !ok {
			t.Errorf("the getting-started pipeline reads env(%q), which examples/systemd/walcast.env does not define", m[1])
		}
	}

	// walcast@shop, as systemd would start it.
	dsn, db := newSource(t, `CREATE TABLE public.orders (id serial PRIMARY KEY, customer text NOT NULL, total numeric(10,2))`)
	if err := os.WriteFile(filepath.Join(etc, "shop.hcl"), []byte(pipeline), 0o644); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ExecStart=(\S+) (.*)$`).FindStringSubmatch(readFile(t, "../../examples/systemd/walcast@.service"))
	args := strings.Fields(strings.ReplaceAll(strings.ReplaceAll(m[2], "%i", "shop"), "/etc/walcast", etc))
	cmd := walcastCommand(args...)
	cmd.Env = []string{"WALCAST_SOURCE_DSN=" + dsn}
	for k, v := range env {
		if k != "WALCAST_SOURCE_DSN" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	w := startWalcastCmd(t, cmd)
	t.Cleanup(func() { dropSlot(dsn, "walcast_shop") })
	w.waitLog(t, "streaming from slot")
	exec1(t, db, `INSERT INTO public.orders (customer, total) VALUES ('ada', 19.90)`)
	w.waitLog(t, `"table":"orders","op":"insert"`)
	w.cmd.Process.Signal(syscall.SIGTERM) // KillSignal=SIGTERM
	select {
	case <-w.exited:
		if w.err != nil {
			t.Errorf("walcast after the unit's SIGTERM: %v", w.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("walcast still runs a minute after SIGTERM")
	}
	if out, _, code := walcastTimed(t, time.Minute, []string{"WALCAST_SOURCE_DSN=" + dsn}, "teardown", filepath.Join(etc, "shop.hcl"), "--yes"); code != 0 {
		t.Errorf("teardown: exit %d\n%s", code, out)
	}
}

// needSystemdAnalyze returns systemd-analyze, failing the test in CI when
// it is missing (the Makefile's tools step installs Debian's systemd) and
// skipping it by hand.
func needSystemdAnalyze(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("systemd-analyze")
	if err != nil {
		hint := "run `make tools` (it runs apt-get install -y systemd)"
		if os.Getenv("CI") == "true" {
			t.Fatalf("systemd-analyze not found in CI: the Makefile's tools step should have installed it; %s", hint)
		}
		t.Skipf("systemd-analyze is missing, so the example units cannot be checked; %s", hint)
	}
	return path
}

// envFile reads a systemd EnvironmentFile: NAME=value lines, comments
// and blank lines skipped, one level of quotes removed.
func envFile(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, ";") {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok || strings.HasPrefix(k, "export ") {
			t.Fatalf("%s: %q is not NAME=value as systemd reads it", path, l)
		}
		out[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"'`)
	}
	return out
}
