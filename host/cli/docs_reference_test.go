package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/plugin/sinkclient"
	"github.com/walcast/walcast/host/internal/report"
)

// The reference pages of docs/reference/ name what walcast has: these
// tests read the same names from the code and fail when a page misses
// one or names one the code does not have.

// mdSection is one heading of a page and the lines under it, up to the
// next heading of the same or a higher level.
type mdSection struct {
	title string // without backticks
	lines []string
}

// pageSections reads path's sections at heading level (2 for ##).
func pageSections(t *testing.T, path string, level int) []mdSection {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	prefix := strings.Repeat("#", level) + " "
	var out []mdSection
	fenced := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
		}
		if m := heading.FindStringSubmatch(l); m != nil && !fenced && len(m[1]) <= level {
			if strings.HasPrefix(l, prefix) {
				out = append(out, mdSection{title: strings.ReplaceAll(m[2], "`", "")})
				continue
			}
			out = append(out, mdSection{}) // a higher heading ends the section
			continue
		}
		if len(out) > 0 {
			out[len(out)-1].lines = append(out[len(out)-1].lines, l)
		}
	}
	return out
}

// mdTableRows returns the cells of every table row of lines, header and
// separator rows left out.
func mdTableRows(lines []string) [][]string {
	var out [][]string
	for i, l := range lines {
		if !strings.HasPrefix(l, "|") || strings.HasPrefix(l, "|---") {
			continue
		}
		if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "|---") {
			continue // a header
		}
		cells := strings.Split(strings.Trim(l, "|"), " | ")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		out = append(out, cells)
	}
	return out
}

var (
	codeSpan = regexp.MustCompile("`([^`]*)`")
	flagCell = regexp.MustCompile("^`--([a-z][a-z-]*)")
	// helpFlag is a flag line of a command's help and, on the lines
	// under it, the default the flag package prints.
	helpFlag    = regexp.MustCompile(`^  --([a-z][a-z-]*)(?: (\S+))?$`)
	helpDefault = regexp.MustCompile(` \(default ("[^"]*"|[^ ()]+)\)$`)
)

// helpFlags returns the flags `walcast help NAME` prints, with the
// default the flag package gives each ("" for a zero default).
func helpFlags(t *testing.T, name string) map[string]string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := dispatch(append([]string{"help"}, strings.Fields(name)...), &out, &errOut, ""); code != 0 {
		t.Fatalf("walcast help %s: exit %d\n%s", name, code, errOut.String())
	}
	flags := map[string]string{}
	var cur, kind string
	for _, l := range strings.Split(out.String(), "\n") {
		if m := helpFlag.FindStringSubmatch(l); m != nil {
			cur, kind = m[1], m[2]
			flags[cur] = ""
			continue
		}
		if cur == "" || !strings.HasPrefix(l, "      ") {
			continue
		}
		// A string flag's default is quoted; an unquoted "(default …)"
		// at the end of its usage is the usage's own words.
		if m := helpDefault.FindStringSubmatch(l); m != nil && (kind == "string") == strings.HasPrefix(m[1], `"`) {
			flags[cur] = strings.Trim(m[1], `"`)
		}
	}
	return flags
}

// TestCommandReference checks docs/reference/commands.md against the
// commands walcast has: a section per command, and in it a row per flag
// its help prints, with the help's default, and nothing else.
func TestCommandReference(t *testing.T) {
	const page = "docs/reference/commands.md"
	sections := map[string][]string{}
	for _, s := range pageSections(t, "../../"+page, 2) {
		sections[s.title] = s.lines
	}
	for _, c := range commands("") {
		title := "walcast " + c.name
		lines, ok := sections[title]
		if !ok {
			t.Errorf("%s has no section ## `%s`", page, title)
			continue
		}
		delete(sections, title)
		want := helpFlags(t, c.name)
		got := map[string]string{}
		for _, row := range mdTableRows(lines) {
			m := flagCell.FindStringSubmatch(row[0])
			if m == nil || len(row) < 2 {
				continue
			}
			got[m[1]] = strings.Trim(row[1], "`")
		}
		for f, def := range want {
			doc, ok := got[f]
			switch {
			case !ok:
				t.Errorf("%s, %s: flag --%s is missing", page, title, f)
			case !sameDefault(doc, def):
				t.Errorf("%s, %s: --%s defaults to %q, the page says %q", page, title, f, def, doc)
			}
		}
		for f := range got {
			if _, ok := want[f]; !ok {
				t.Errorf("%s, %s: walcast %s has no flag --%s", page, title, c.name, f)
			}
		}
	}
	for title := range sections {
		if strings.HasPrefix(title, "walcast ") {
			t.Errorf("%s has a section for %q, which is not a walcast command", page, title)
		}
	}
}

// sameDefault compares a default as the page writes it with the help's:
// durations by value (1m is 1m0s).
func sameDefault(doc, help string) bool {
	if doc == help {
		return true
	}
	d1, err1 := time.ParseDuration(doc)
	d2, err2 := time.ParseDuration(help)
	return err1 == nil && err2 == nil && d1 == d2
}

// TestStatusReference checks the table of `walcast status --json`'s
// fields in docs/reference/status.md against the type the command
// encodes: every field, its JSON type, whether it can be omitted, and an
// example that uses only fields that exist.
func TestStatusReference(t *testing.T) {
	const page = "docs/reference/status.md"
	var section []string
	for _, s := range pageSections(t, "../../"+page, 2) {
		if s.title == "Every field of --json" {
			section = s.lines
		}
	}
	if section == nil {
		t.Fatalf("%s has no section ## Every field of `--json`", page)
	}
	want := map[string]jsonField{}
	jsonFields(reflect.TypeOf(statusJSON(report.State{}, time.Now())), "", want)
	got := map[string][]string{}
	for _, row := range mdTableRows(section) {
		if m := codeSpan.FindStringSubmatch(row[0]); m != nil && len(row) == 3 {
			got[m[1]] = row
		}
	}
	for path, f := range want {
		row, ok := got[path]
		if !ok {
			t.Errorf("%s: field %s is missing", page, path)
			continue
		}
		if !strings.HasPrefix(row[1], f.kind) || f.nullable != strings.HasSuffix(row[1], " or null") {
			t.Errorf("%s: %s is a JSON %s (null: %v), the page says %q", page, path, f.kind, f.nullable, row[1])
		}
		if f.omitempty && !strings.Contains(row[2], "omitted") {
			t.Errorf("%s: %s is left out of the JSON when it is empty; the page must say when it is omitted", page, path)
		}
	}
	for path := range got {
		if _, ok := want[path]; !ok {
			t.Errorf("%s: walcast status --json has no field %s", page, path)
		}
	}
	example := ""
	in := false
	for _, l := range section {
		switch {
		case l == "```json":
			in = true
		case l == "```":
			in = false
		case in:
			example += l + "\n"
		}
	}
	var v any
	if err := json.Unmarshal([]byte(example), &v); err != nil {
		t.Fatalf("%s: the example is not JSON: %v", page, err)
	}
	for _, path := range examplePaths(v, "") {
		if _, ok := want[path]; !ok {
			t.Errorf("%s: the example has %s, which walcast status --json does not print", page, path)
		}
	}
}

// jsonField is what the reference says of one field of the JSON.
type jsonField struct {
	kind                string // string, number, boolean, object, array
	nullable, omitempty bool
}

// jsonFields walks typ as encoding/json encodes it, recording each field
// by its path: "sinks[].backlog.events".
func jsonFields(typ reflect.Type, prefix string, out map[string]jsonField) {
	for i := range typ.NumField() {
		sf := typ.Field(i)
		tag, opts, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if tag == "" || tag == "-" {
			continue
		}
		path := prefix + tag
		ft := sf.Type
		f := jsonField{omitempty: strings.Contains(opts, "omitempty")}
		if ft.Kind() == reflect.Pointer {
			ft, f.nullable = ft.Elem(), !f.omitempty
		}
		switch {
		case ft == reflect.TypeFor[time.Time]() || ft.Kind() == reflect.String:
			f.kind = "string"
		case ft.Kind() == reflect.Bool:
			f.kind = "boolean"
		case ft.Kind() == reflect.Slice:
			f.kind = "array"
			if ft.Elem().Kind() == reflect.Struct {
				jsonFields(ft.Elem(), path+"[].", out)
			}
		case ft.Kind() == reflect.Struct:
			f.kind = "object"
			jsonFields(ft, path+".", out)
		default:
			f.kind = "number"
		}
		out[path] = f
	}
}

// examplePaths lists the field paths of a decoded JSON value.
func examplePaths(v any, prefix string) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			out = append(out, prefix+k)
			out = append(out, examplePaths(e, prefix+k+".")...)
		}
	case []any:
		p := strings.TrimSuffix(prefix, ".") + "[]."
		for _, e := range v {
			out = append(out, examplePaths(e, p)...)
		}
	}
	return out
}

// TestSinkConfigsDocumented checks that each built-in sink has its
// section in docs/sinks.md naming every attribute its plugin declares,
// and that the README's index and the settings reference link to it.
func TestSinkConfigsDocumented(t *testing.T) {
	root := repoRoot(t)
	sections := map[string]string{}
	for _, s := range pageSections(t, filepath.Join(root, "docs/sinks.md"), 2) {
		sections[s.title] = strings.Join(s.lines, "\n")
	}
	readme, _ := os.ReadFile(filepath.Join(root, "README.md"))
	settings, _ := os.ReadFile(filepath.Join(root, "docs/reference/settings.md"))
	names := builtinSinks(root)
	if len(names) < 5 {
		t.Fatalf("found %d plugins", len(names))
	}
	for _, name := range names {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		info, err := sinkclient.Describe(ctx, sinkclient.Config{Path: filepath.Join(binDir, sinkclient.ExecutableName(name))}, nil)
		cancel()
		if err != nil {
			t.Fatalf("describe %s: %v", name, err)
		}
		text, ok := sections[name]
		if !ok {
			t.Errorf("docs/sinks.md has no section ## %s", name)
			continue
		}
		for _, f := range info.Config {
			// In the section's hcl block (name = …), or in a code span
			// (`name` or `name = …`).
			n := regexp.QuoteMeta(f.Name)
			if !regexp.MustCompile("(?m)(^\\s*" + n + "\\s*=|`" + n + "(`|\\s*=))").MatchString(text) {
				t.Errorf("docs/sinks.md, ## %s: the %s sink's attribute %s is not documented", name, name, f.Name)
			}
		}
		link := "docs/sinks.md#" + anchorOf(name)
		if !bytes.Contains(readme, []byte("("+link+")")) {
			t.Errorf("README.md's index does not link to %s", link)
		}
		if !bytes.Contains(settings, []byte("(../sinks.md#"+anchorOf(name)+")")) {
			t.Errorf("docs/reference/settings.md's config section does not link to the %s sink", name)
		}
	}
}
