package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Tests that walcast status, pause and teardown say only what is true:
// machine values and a schema for --json (with the backfills), an exit
// status scripts can act on, the standbys only when there are some, a
// paused sink as paused.

// needJSONSchema returns a validator command for docs/reference/status.schema.json:
// Debian's python3-jsonschema, an implementation nobody on this project
// wrote. It fails the test with what to do when it is missing (in CI the
// Makefile's tools step installs it); by hand without it the test skips.
func needJSONSchema(t *testing.T) string {
	t.Helper()
	const py = "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import jsonschema").Run(); err != nil {
		hint := "run `make tools` (it runs apt-get install -y python3-jsonschema)"
		if os.Getenv("CI") == "true" {
			t.Fatalf("python3-jsonschema not found in CI: the Makefile's tools step should have installed it; %s", hint)
		}
		t.Skipf("python3-jsonschema is missing, so walcast status --json cannot be checked against its schema; %s", hint)
	}
	return py
}

// validateStatusJSON checks out (walcast status --json) against the
// schema in docs/, with the independent validator, and returns it
// decoded.
func validateStatusJSON(t *testing.T, py, out string) map[string]any {
	t.Helper()
	schema, err := filepath.Abs("../../docs/reference/status.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join(t.TempDir(), "status.json")
	if err := os.WriteFile(doc, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "-c", `
import json, sys, jsonschema
schema = json.load(open(sys.argv[1]))
v = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
errors = sorted(v.iter_errors(json.load(open(sys.argv[2]))), key=str)
for e in errors:
    print("/".join(map(str, e.absolute_path)) + ": " + e.message)
sys.exit(1 if errors else 0)`, schema, doc)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("walcast status --json does not match docs/reference/status.schema.json (%v):\n%s\noutput:\n%s", err, b, out)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// statusJSONOf runs walcast status --json and returns its output and exit
// status.
func statusJSONOf(t *testing.T, pipeline string) (string, int) {
	t.Helper()
	out, _, code := walcastCmd(t, "status", pipeline, "--json")
	return out, code
}

// TestStatusJSONMatchesItsSchema: with a leader, a paused sink detached
// from the live stream, a queued backfill and after a stop, walcast
// status --json validates against the documented schema, says "idle" and
// "paused" as machine values, lists the backfills the text shows, and the
// text names standbys only when there are some and shows the paused sink
// as paused.
func TestStatusJSONMatchesItsSchema(t *testing.T) {
	py := needJSONSchema(t)
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v text)`, `INSERT INTO items SELECT g, 'x' FROM generate_series(1, 10) g`)
	a, b := newReceiver(t), newReceiver(t)
	p := writePipeline(t, "stjson", dsn, []string{"public.items"}, sinkSpec{ID: "a", URL: a.URL}, sinkSpec{ID: "b", URL: b.URL})

	// Idle: no walcast run; a backfill waits for one.
	if out, err := walcastCLI(t, "backfill", p, "--table", "public.items", "--sink", "a"); err != nil {
		t.Fatalf("walcast backfill: %v\n%s", err, out)
	}
	out, code := statusJSONOf(t, p)
	if code != 0 {
		t.Fatalf("walcast status --json: exit %d\n%s", code, out)
	}
	m := validateStatusJSON(t, py, out)
	sinks := m["sinks"].([]any)
	if st := sinks[0].(map[string]any)["state"]; st != "idle" {
		t.Errorf(`sink state %q with no walcast run, want "idle"`, st)
	}
	bfs := m["backfills"].([]any)
	if len(bfs) != 1 || bfs[0].(map[string]any)["table"] != "public.items" || bfs[0].(map[string]any)["state"] != "queued" {
		t.Errorf("backfills %v, want the queued backfill of public.items", m["backfills"])
	}

	// Leading, alone: no standby to speak of; then a paused sink.
	w := startWalcast(t, p)
	w.waitLog(t, "streaming from slot")
	text, _ := walcastOut(t, "status", p)
	if strings.Contains(text, "stand by") && !strings.Contains(text, "no other walcast run of this pipeline stands by") {
		t.Errorf("walcast status speaks of standbys when there are none:\n%s", text)
	}
	pause, err := walcastCLI(t, "pause", p, "--sink", "a")
	if err != nil {
		t.Fatalf("walcast pause: %v\n%s", err, pause)
	}
	wantAll(t, pause, "paused sink a of pipeline stjson", "the other sinks go on", "detached onto a catch-up slot of its own")
	if strings.Contains(pause, "other sinks of the pipeline stop") {
		t.Errorf("walcast pause claims the other sinks stop:\n%s", pause)
	}
	exec1(t, db, `INSERT INTO items SELECT g, 'y' FROM generate_series(11, 20) g`)
	waitFor(t, "sink b to go on while a is paused", time.Minute, func() bool { return b.distinct() >= 10 })
	waitFor(t, "the paused sink on a catch-up slot in walcast status", time.Minute, func() bool {
		text, _ = walcastOut(t, "status", p)
		return strings.Contains(text, "sink a: paused on its own slot")
	})
	if strings.Contains(text, "fell behind") {
		t.Errorf("walcast status says the paused sink fell behind:\n%s", text)
	}
	out, code = statusJSONOf(t, p)
	m = validateStatusJSON(t, py, out)
	for _, s := range m["sinks"].([]any) {
		s := s.(map[string]any)
		want := map[string]string{"a": "paused", "b": "running"}[s["id"].(string)]
		if s["state"] != want || (s["id"] == "a") != (s["paused_since"] != nil) {
			t.Errorf("sink %v: state %v, paused_since %v; want %s", s["id"], s["state"], s["paused_since"], want)
		}
	}
	if m["leader"] == nil || code != 0 {
		t.Errorf("walcast status --json while leading: exit %d, leader %v", code, m["leader"])
	}
	w.stop()
}

// TestStatusExitsNonZeroWhenRunRefuses: a slot dropped while walcast was
// stopped makes walcast run refuse; walcast status says so and exits 3
// (1 is for a status that could not be read), text and JSON alike, with
// the refusal's kind as a machine value.
func TestStatusExitsNonZeroWhenRunRefuses(t *testing.T) {
	py := needJSONSchema(t)
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY)`)
	rcv := newReceiver(t)
	p := writePipeline(t, "strefuse", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL})
	streamItems(t, db, p, "walcast_strefuse", rcv, 1, 3)
	if out, code := walcastOut(t, "status", p); code != 0 {
		t.Fatalf("walcast status of a healthy pipeline: exit %d\n%s", code, out)
	}
	exec1(t, db, `SELECT pg_drop_replication_slot('walcast_strefuse')`)
	text, code := walcastOut(t, "status", p)
	if code != exitRunRefuses || !strings.Contains(text, "walcast run refuses to start (slot lost)") {
		t.Errorf("walcast status after the slot was lost: exit %d, want %d, and the refusal:\n%s", code, exitRunRefuses, text)
	}
	out, code := statusJSONOf(t, p)
	m := validateStatusJSON(t, py, out)
	ref, _ := m["refusal"].(map[string]any)
	if code != exitRunRefuses || ref == nil || ref["kind"] != "slot lost" || m["slot"].(map[string]any)["state"] != "missing" {
		t.Errorf("walcast status --json after the slot was lost: exit %d, refusal %v, slot %v", code, m["refusal"], m["slot"])
	}
}
