package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The docs are part of the product: every snippet in README.md and docs/
// is exercised here, so that none can drift from what walcast does.

// block is one fenced code block of a Markdown file.
type block struct {
	file, lang, text string
	line             int
}

// docFiles returns README.md and every Markdown page under docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"../../README.md"}
	err := filepath.WalkDir("../../docs", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func docBlocks(t *testing.T) []block {
	t.Helper()
	files := docFiles(t)
	var out []block
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		var cur *block
		var text strings.Builder
		for n := 1; sc.Scan(); n++ {
			l := sc.Text()
			trimmed := strings.TrimSpace(l)
			switch {
			case cur == nil && strings.HasPrefix(trimmed, "```"):
				cur = &block{file: filepath.Base(f), lang: strings.TrimPrefix(trimmed, "```"), line: n}
				text.Reset()
			case cur != nil && trimmed == "```":
				cur.text = text.String()
				out = append(out, *cur)
				cur = nil
			case cur != nil:
				text.WriteString(l + "\n")
			}
		}
	}
	return out
}

// TestGettingStarted follows docs/getting-started.md to the letter against
// a real PostgreSQL: its SQL as the administrator, its pipeline file, and
// its commands as written (only the database's address is this test's).
func TestGettingStarted(t *testing.T) {
	var steps []block
	for _, b := range docBlocks(t) {
		if b.file == "getting-started.md" {
			steps = append(steps, b)
		}
	}
	if len(steps) < 8 {
		t.Fatalf("getting-started.md has %d code blocks; the test expects the whole walkthrough", len(steps))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	adminDSN, admin := newSource(t)
	var dbName string
	admin.QueryRow(ctx, `SELECT current_database()`).Scan(&dbName)
	dir := t.TempDir()
	env := []string{"PATH=" + binDir + string(os.PathListSeparator) + os.Getenv("PATH")}
	var run *walcastProc
	runOut := func() string {
		if run == nil {
			return ""
		}
		return run.logText()
	}
	shell := func(b block, line string) {
		t.Helper()
		fields := strings.Fields(line)
		switch {
		case line == "make build":
			// TestMain built these binaries from this checkout already.
		case strings.HasPrefix(line, `export PATH=`):
			// Done above: binDir is this checkout's bin/.
		case strings.HasPrefix(line, "export WALCAST_SOURCE_DSN="):
			doc, err := url.Parse(strings.Trim(strings.TrimPrefix(line, "export WALCAST_SOURCE_DSN="), `"'`))
			if err != nil {
				t.Fatalf("%s:%d: %v", b.file, b.line, err)
			}
			ours, _ := url.Parse(adminDSN)
			doc.Host, doc.Path = ours.Host, "/"+dbName
			env = append(env, "WALCAST_SOURCE_DSN="+doc.String())
		case fields[0] == "walcast" && fields[1] == "run":
			cmd := walcastCommand(fields[1:]...)
			cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
			run = startWalcastCmd(t, cmd)
			waitFor(t, "walcast run to stream", time.Minute, func() bool { return strings.Contains(runOut(), "streaming from slot") })
		case fields[0] == "walcast":
			if fields[1] == "teardown" && run != nil {
				// The page says: stop walcast first (Ctrl-C).
				run.cmd.Process.Signal(os.Interrupt)
				if <-run.exited; run.err != nil {
					t.Fatalf("walcast run after Ctrl-C: %v\n%s", run.err, runOut())
				}
			}
			cmd := walcastCommand(fields[1:]...)
			cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s:%d: %s: %v\n%s", b.file, b.line, line, err, out)
			}
			t.Logf("$ %s\n%s", line, out)
		default:
			t.Fatalf("%s:%d: the test does not know how to run %q; teach it or change the page", b.file, b.line, line)
		}
	}
	for _, b := range steps {
		switch b.lang {
		case "sh":
			for _, l := range strings.Split(strings.TrimSpace(b.text), "\n") {
				shell(b, strings.TrimSpace(l))
			}
		case "sql":
			for _, stmt := range sqlStatements(b.text) {
				stmt = strings.ReplaceAll(stmt, "DATABASE shop", "DATABASE "+pgx.Identifier{dbName}.Sanitize())
				if strings.HasPrefix(stmt, "CREATE ROLE walcast") {
					admin.Exec(ctx, `DROP ROLE IF EXISTS walcast`) // a rerun of this test in the same cluster
				}
				var res string
				if strings.HasPrefix(stmt, "SHOW wal_level") {
					admin.QueryRow(ctx, stmt).Scan(&res)
					if res != "logical" {
						t.Fatalf("wal_level is %q", res)
					}
					continue
				}
				if _, err := admin.Exec(ctx, stmt); err != nil {
					t.Fatalf("%s:%d: %s: %v", b.file, b.line, stmt, err)
				}
			}
			if strings.Contains(b.text, "INSERT INTO public.orders") {
				waitFor(t, "the change as a JSON line", time.Minute, func() bool {
					return strings.Contains(runOut(), `"table":"orders","op":"insert"`)
				})
			}
		case "hcl":
			if err := os.WriteFile(filepath.Join(dir, "pipeline.hcl"), []byte(b.text), 0o644); err != nil {
				t.Fatal(err)
			}
		case "json":
			// The printed line has the fields the page shows, in its order.
			var line string
			for _, l := range strings.Split(runOut(), "\n") {
				if strings.HasPrefix(l, `{"id"`) {
					line = l
				}
			}
			if got, want := jsonKeys(t, line), jsonKeys(t, strings.TrimSpace(b.text)); !slices.Equal(got, want) {
				t.Errorf("%s:%d: the page shows fields %v, walcast printed %v", b.file, b.line, want, got)
			}
		default:
			t.Fatalf("%s:%d: unexpected block %q", b.file, b.line, b.lang)
		}
	}
	var slots int
	admin.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'walcast_shop'`).Scan(&slots)
	if slots != 0 {
		t.Error("the slot is still there after walcast teardown")
	}
}

// TestDocSnippets checks the other snippets: every pipeline or sink block
// passes walcast validate with the real plugins, every walcast command
// line names a real command and real flags, every other shell command a
// make target, go package or script that exists, every JSON example
// parses, every Go example is valid Go and every JavaScript one valid
// JavaScript. A block of another kind must be run by a test named in
// runElsewhere.
func TestDocSnippets(t *testing.T) {
	blocks := docBlocks(t)
	makefile, err := os.ReadFile(filepath.Join(repoRoot(t), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range makeTarget.FindAllStringSubmatch(string(makefile), -1) {
		targets[m[1]] = true
	}
	n := 0
	for _, b := range blocks {
		if b.file == "getting-started.md" {
			continue
		}
		name := fmt.Sprintf("%s:%d", b.file, b.line)
		switch b.lang {
		case "hcl":
			n++
			checkHCLSnippet(t, name, b.text)
		case "json":
			n++
			if !json.Valid([]byte(strings.TrimSpace(b.text))) {
				t.Errorf("%s: not valid JSON", name)
			}
		case "go":
			n++
			// Imports at the top, the rest as a file when it declares
			// functions, else as the body of one.
			var imports, body strings.Builder
			for _, l := range strings.Split(b.text, "\n") {
				if strings.HasPrefix(l, "import ") {
					imports.WriteString(l + "\n")
				} else {
					body.WriteString(l + "\n")
				}
			}
			src := "package p\n" + imports.String() + "func _() {\n" + body.String() + "\n}\n"
			if strings.Contains(b.text, "func ") {
				src = "package p\n" + imports.String() + body.String()
			}
			if _, err := parser.ParseFile(token.NewFileSet(), name, src, parser.AllErrors); err != nil {
				t.Errorf("%s: not valid Go: %v", name, err)
			}
		case "sh", "sh release":
			for _, l := range shellLines(b.text) {
				n++
				checkShellLine(t, name, l, targets)
			}
		case "", "text":
			// Output and diagrams; a command shown in one is checked.
			for _, l := range strings.Split(b.text, "\n") {
				l = strings.TrimPrefix(strings.TrimSpace(l), "$ ")
				if f := strings.Fields(l); len(f) > 1 && f[0] == "walcast" && !strings.HasSuffix(f[1], ":") { // not "walcast run: <error>"
					n++
					checkCommandLine(t, name, l)
				}
			}
		case "js":
			n++
			checkJS(t, name, b.text)
		default:
			if runner, ok := runElsewhere[b.lang+" "+b.file]; !ok {
				t.Errorf("%s: no test runs this %q block; add it to TestDocSnippets (or to runElsewhere, naming the test that runs it)", name, b.lang)
			} else if runner == "" {
				t.Errorf("%s: runElsewhere names no test", name)
			}
		}
	}
	if n < 60 {
		t.Fatalf("only %d snippets checked; did the docs move?", n)
	}
}

// runElsewhere lists the blocks other tests run, by language and page,
// with the test that runs them.
var runElsewhere = map[string]string{
	"sql getting-started.md":       "TestGettingStarted",
	"sql roles-and-grants.md":      "TestDocumentedGrantsLetASecondRoleRun (docSQL)",
	"sql events.md":                "TestMessagesThroughTheWAL (the application message example)",
	"sql outbox.md":                "TestOutboxWebhook (the outbox table and the service transaction, run as they are)",
	"yaml monitoring.md":           "TestAlertRules (host/internal/daemon): the rules file, verbatim, under promtool",
	"go main.go writing-a-sink.md": "TestSinkOutsideRepository",
	"sh replace writing-a-sink.md": "TestSinkOutsideRepository",
	"sh work writing-a-sink.md":    "TestSinkOutsideRepository",
}

// shellLines returns a shell block's commands: continuation lines joined,
// comments and blank lines left out.
func shellLines(text string) []string {
	var out []string
	cur := ""
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		l = strings.TrimSpace(shellComment.ReplaceAllString(cur+l, ""))
		cur = ""
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

var (
	shellComment = regexp.MustCompile(`(^|\s+)#.*$`)
	makeTarget   = regexp.MustCompile(`(?m)^([a-z][a-z-]*):`)
	envAssign    = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`)
)

// byHand are the programs of measurement recipes a person runs on a
// machine of their own (docs/benchmarks.md profiles a walsender with
// perf); no test can stand in for them.
var byHand = []string{"perf", "pid=$(pgrep"}

// checkShellLine checks one command of a shell block: walcast's
// commands and flags, make targets that exist, go commands on packages
// that exist, scripts of the repository, environment variables.
func checkShellLine(t *testing.T, name, line string, targets map[string]bool) {
	t.Helper()
	root := repoRoot(t)
	fields := shellFields(line)
	switch {
	case fields[0] == "walcast":
		checkCommandLine(t, name, line)
	case fields[0] == "make":
		for _, f := range fields[1:] {
			if !envAssign.MatchString(f) && !targets[f] {
				t.Errorf("%s: %q: the Makefile has no target %s", name, line, f)
			}
		}
	case fields[0] == "go":
		if len(fields) < 2 || !slices.Contains([]string{"build", "test", "run", "mod", "work", "get", "install", "vet"}, fields[1]) {
			t.Errorf("%s: %q: not a go command the docs use", name, line)
		}
		for _, f := range fields[2:] {
			if strings.HasPrefix(f, "./") {
				if _, err := os.Stat(filepath.Join(root, strings.TrimSuffix(f, "/..."))); err != nil {
					t.Errorf("%s: %q: no package %s in the repository", name, line, f)
				}
			}
		}
	case fields[0] == "export":
		if len(fields) < 2 || !envAssign.MatchString(fields[1]) {
			t.Errorf("%s: %q: export NAME=value", name, line)
		}
	case strings.Contains(fields[0], "/"):
		if st, err := os.Stat(filepath.Join(root, fields[0])); err != nil || st.Mode()&0o111 == 0 {
			t.Errorf("%s: %q: %s is not an executable of the repository", name, line, fields[0])
		}
	case slices.Contains(byHand, fields[0]):
	default:
		t.Errorf("%s: the test does not know how to check %q; teach checkShellLine or change the page", name, line)
	}
}

// shellFields splits a command line into words as the shell does for
// the quoting the docs use: '…' and "…" keep their spaces.
func shellFields(line string) []string {
	var out []string
	var cur strings.Builder
	quote := rune(0)
	in := false
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

// checkJS has node parse a JavaScript snippet. node comes with `make
// tools`; without it the check is skipped by hand and fails in CI.
func checkJS(t *testing.T, name, text string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Errorf("%s: node not found in CI: the Makefile's tools target installs it", name)
		}
		t.Logf("%s: node not found (run make tools); the JavaScript is not checked", name)
		return
	}
	file := filepath.Join(t.TempDir(), "snippet.js")
	os.WriteFile(file, []byte(text), 0o644)
	if out, err := exec.Command(node, "--check", file).CombinedOutput(); err != nil {
		t.Errorf("%s: not valid JavaScript: %v\n%s", name, err, out)
	}
}

var envCall = regexp.MustCompile(`env\("([A-Z0-9_]+)"\)`)
var quotedTable = regexp.MustCompile(`"(public\.[^"]+)"`)

// checkHCLSnippet validates a whole pipeline, or a sink block inside a
// minimal one, with walcast validate and the real plugins. A snippet may
// name files that exist only on the reader's machine (certificates); the
// only errors it may then give are about those files.
func checkHCLSnippet(t *testing.T, name, text string) {
	t.Helper()
	src := text
	if !strings.Contains(text, "pipeline =") {
		if !strings.HasPrefix(strings.TrimSpace(text), "sink ") {
			t.Errorf("%s: an hcl snippet must be a pipeline or a sink block", name)
			return
		}
		tables := []string{`"public.orders"`}
		for _, m := range quotedTable.FindAllStringSubmatch(text, -1) {
			if !slices.Contains(tables, `"`+m[1]+`"`) {
				tables = append(tables, `"`+m[1]+`"`)
			}
		}
		src = "pipeline = \"docs\"\nsource \"postgres\" {\n  dsn = \"postgres://walcast@db/shop\"\n  tables = [" + strings.Join(tables, ", ") + "]\n}\n" + text
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "pipeline.hcl")
	os.WriteFile(file, []byte(src), 0o644)
	var env []string
	for _, m := range envCall.FindAllStringSubmatch(src, -1) {
		value := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		if strings.HasSuffix(m[1], "_DSN") {
			value = "postgres://walcast@db.example/shop" // validate parses a dsn
		}
		env = append(env, m[1]+"="+value)
	}
	cmd := walcastCommand("validate", file, "--plugin-dir", binDir)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return
	}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !strings.Contains(l, "no such file or directory") {
			t.Errorf("%s: walcast validate:\n%s\nsnippet:\n%s", name, out, src)
			return
		}
	}
}

var flagName = regexp.MustCompile(`--[a-z][a-z-]*`)

// checkCommandLine checks that a documented command exists and that every
// flag it shows is one the command has.
func checkCommandLine(t *testing.T, name, line string) {
	t.Helper()
	fields := strings.Fields(line)
	args := []string{fields[1]}
	if isGroup(fields[1]) && len(fields) > 2 { // walcast plugin install, walcast library retire
		args = append(args, fields[2])
	}
	cmd := walcastCommand(append(args, "-h")...)
	help, _ := cmd.CombinedOutput()
	if strings.Contains(string(help), "unknown command") {
		t.Errorf("%s: %q: walcast has no command %q", name, line, strings.Join(args, " "))
		return
	}
	for _, f := range flagName.FindAllString(line, -1) {
		if f == "--help" {
			continue
		}
		if !regexp.MustCompile(`(?m)(^|\s)--?` + regexp.QuoteMeta(strings.TrimLeft(f, "-")) + `\b`).Match(help) {
			t.Errorf("%s: %q: walcast %s has no flag %s:\n%s", name, line, strings.Join(args, " "), f, help)
		}
	}
}

func sqlStatements(text string) []string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if i := strings.Index(l, "--"); i >= 0 {
			l = strings.TrimSpace(l[:i])
		}
		if l != "" {
			out = append(out, strings.TrimSuffix(l, ";"))
		}
	}
	return out
}

func jsonKeys(t *testing.T, s string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not a JSON object: %q", s)
	}
	var keys []string
	for dec.More() {
		k, _ := dec.Token()
		keys = append(keys, k.(string))
		var v json.RawMessage
		dec.Decode(&v)
	}
	return keys
}
