package cli

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The messages walcast refuses or stops with, read from its source, so
// that docs/reference/errors.md can be checked against them in both
// directions: every message of the families below is on the page, and
// every message the page quotes is one the code can print.

// codeMessage is one message as the code builds it: its literal pieces,
// in order, with what is only known at run time (a name, a number, an
// error) left out between them.
type codeMessage struct {
	pos    string // file:line, for the test's error
	family string // "pipeline file", "source not ready", "database", "slot changed"
	pieces []string
}

// messageFamilies says where each family of messages is built, and how
// to recognise it in the syntax tree.
var messageFamilies = []struct {
	family string
	glob   string // relative to the repository root
	pick   func(n ast.Node) []ast.Expr
}{
	// A pipeline file's diagnostics: their summaries (the detail says the
	// rest, with the file's own names in it).
	{"pipeline file", "host/internal/config/*.go", diagnosticSummaries},
	// What a start finds the source database lacks before it creates
	// anything (capture.Finding), and the refusals when the slot, its
	// publication or the database changed under walcast (…What).
	{"source not ready", "host/internal/source/capture/*.go", fieldValues("Problem")},
	{"slot changed", "host/internal/source/capture/*.go", fieldValues("What")},
	{"slot changed", "host/internal/delivery/isolate/*.go", fieldValues("What")},
	// PostgreSQL's permanent errors, explained: the problem each names.
	{"database", "host/internal/pg/errors.go", explainedProblems},
}

// diagnosticSummaries picks the summary of d.errorf(rng, SUMMARY, …),
// d.warnf(…) and hcl.Diagnostic{Summary: …}.
func diagnosticSummaries(n ast.Node) []ast.Expr {
	switch n := n.(type) {
	case *ast.CallExpr:
		if sel, ok := n.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "errorf" || sel.Sel.Name == "warnf") && len(n.Args) >= 2 {
			return []ast.Expr{n.Args[1]}
		}
	case *ast.CompositeLit:
		return fieldValues("Summary")(n)
	}
	return nil
}

// fieldValues picks the values given to a field of that name, in a
// composite literal or an assignment (x.What = …).
func fieldValues(field string) func(ast.Node) []ast.Expr {
	return func(n ast.Node) []ast.Expr {
		var out []ast.Expr
		switch n := n.(type) {
		case *ast.CompositeLit:
			for _, e := range n.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok {
					if k, ok := kv.Key.(*ast.Ident); ok && k.Name == field {
						out = append(out, kv.Value)
					}
				}
			}
		case *ast.AssignStmt:
			for i, l := range n.Lhs {
				if sel, ok := l.(*ast.SelectorExpr); ok && sel.Sel.Name == field && i < len(n.Rhs) {
					out = append(out, n.Rhs[i])
				}
			}
		}
		return out
	}
}

// explainedProblems picks the problem of every `return problem, fix` in
// pg's explanations of PostgreSQL's errors.
func explainedProblems(n ast.Node) []ast.Expr {
	fn, ok := n.(*ast.FuncDecl)
	if !ok || (fn.Name.Name != "explain" && fn.Name.Name != "explainDenied") {
		return nil
	}
	var out []ast.Expr
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		if r, ok := n.(*ast.ReturnStmt); ok && len(r.Results) == 2 {
			if _, call := r.Results[0].(*ast.CallExpr); !call { // explainDenied's own result
				out = append(out, r.Results[0])
			}
		}
		return true
	})
	return out
}

// codeMessages reads every message of messageFamilies from the source.
func codeMessages(t *testing.T) []codeMessage {
	t.Helper()
	root := repoRoot(t)
	consts := stringConsts(t, root)
	var out []codeMessage
	for _, fam := range messageFamilies {
		files, _ := filepath.Glob(filepath.Join(root, fam.glob))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			file, err := parser.ParseFile(fset, f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				for _, e := range fam.pick(n) {
					rel, _ := filepath.Rel(root, f)
					pos := rel + ":" + strconv.Itoa(fset.Position(e.Pos()).Line)
					out = append(out, codeMessage{pos: pos, family: fam.family, pieces: exprPieces(e, consts)})
				}
				return true
			})
		}
	}
	if len(out) < 40 {
		t.Fatalf("found only %d messages in the source; did the code that builds them move?", len(out))
	}
	return out
}

// verb is a fmt verb: what the format fills in at run time.
var verb = regexp.MustCompile(`%(\[\d+\])?[-+# 0]*\d*(\.\d+)?[a-zA-Z]`)

// exprPieces returns the literal pieces of a message expression: the
// strings of a concatenation and of a fmt.Sprintf/Errorf format, split
// where a value goes in. Names of string constants count as their value.
func exprPieces(e ast.Expr, consts map[string]string) []string {
	var pieces []string
	cur := ""
	flush := func() {
		if cur != "" {
			pieces = append(pieces, cur)
		}
		cur = ""
	}
	var walk func(e ast.Expr)
	walk = func(e ast.Expr) {
		switch e := e.(type) {
		case *ast.BasicLit:
			s, err := strconv.Unquote(e.Value)
			if err != nil || e.Kind != token.STRING {
				flush()
				return
			}
			parts := verb.Split(strings.ReplaceAll(s, "%%", "%"), -1)
			for i, p := range parts {
				if i > 0 {
					flush()
				}
				cur += p
			}
		case *ast.BinaryExpr:
			if e.Op != token.ADD {
				flush()
				return
			}
			walk(e.X)
			walk(e.Y)
		case *ast.ParenExpr:
			walk(e.X)
		case *ast.CallExpr:
			if sel, ok := e.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "Sprintf" || sel.Sel.Name == "Errorf") && len(e.Args) > 0 {
				flush()
				walk(e.Args[0])
			}
			flush()
		case *ast.Ident:
			if v, ok := consts[e.Name]; ok {
				cur += v
				return
			}
			flush()
		case *ast.SelectorExpr:
			if v, ok := consts[e.Sel.Name]; ok {
				cur += v
				return
			}
			flush()
		default:
			flush()
		}
	}
	walk(e)
	flush()
	return pieces
}

// stringConsts returns the string constants of the engine's packages by
// name, so that a message built with pg.ControlSchema reads "walcast".
func stringConsts(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	files, _ := filepath.Glob(filepath.Join(root, "host/internal/pg/*.go"))
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							out[n.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
		}
	}
	return out
}

// sourceStrings returns every string literal of the non-test Go files
// under dirs, split where a fmt verb goes: what a message quoted on a page
// must be made of.
func sourceStrings(t *testing.T, dirs ...string) []string {
	t.Helper()
	root := repoRoot(t)
	consts := stringConsts(t, root)
	var out []string
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			file, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(file, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.BinaryExpr:
					out = append(out, exprPieces(n, consts)...)
				case *ast.BasicLit:
					out = append(out, exprPieces(n, consts)...)
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestErrorReference checks docs/reference/errors.md against the code in
// both directions. Every message of messageFamilies is on the page: a
// pipeline file's summaries as a row of its table, the others by a piece
// of at least minQuoted characters of their text. And every message the
// page's tables quote is made of pieces of the code's strings, so a
// reworded message fails until the page follows.
func TestErrorReference(t *testing.T) {
	const page = "docs/reference/errors.md"
	sections := pageSections(t, "../../"+page, 2)
	var text strings.Builder
	var summaries, quoted []string
	for _, s := range sections {
		text.WriteString(strings.Join(s.lines, "\n") + "\n")
		rows := mdTableRows(s.lines)
		for _, row := range rows {
			for _, m := range codeSpan.FindAllStringSubmatch(messageCells(s.lines, row), -1) {
				if s.title == "Pipeline file" {
					summaries = append(summaries, m[1])
				} else {
					quoted = append(quoted, m[1])
				}
			}
		}
	}
	pageText := strings.Join(strings.Fields(text.String()), " ")
	checked := 0
	msgs := codeMessages(t)
	var patterns []*regexp.Regexp
	for _, m := range msgs {
		if pat := summaryPattern(m.pieces); m.family == "pipeline file" && pat != nil {
			patterns = append(patterns, pat)
		}
	}
	for _, m := range msgs {
		if m.family == "pipeline file" {
			if pat := summaryPattern(m.pieces); pat != nil && !slices.ContainsFunc(summaries, pat.MatchString) {
				t.Errorf("%s: the summary %q (%s) is not in the table of %s", m.pos, strings.Join(m.pieces, "…"), m.family, page)
			}
			checked++
			continue
		}
		var long []string
		for _, p := range m.pieces {
			if p = strings.Join(strings.Fields(p), " "); len(strings.Trim(p, " :;,.()")) >= minQuoted {
				long = append(long, strings.Trim(p, " :;,.()"))
			}
		}
		if len(long) == 0 {
			continue // nothing but names and a word or two: too generic to look for
		}
		checked++
		if !slices.ContainsFunc(long, func(p string) bool { return strings.Contains(pageText, p) }) {
			t.Errorf("%s: the %s message %q is not on %s", m.pos, m.family, strings.Join(m.pieces, "…"), page)
		}
	}
	code := sourceStrings(t, "host", "plugins", "pluginkit")
	for _, s := range summaries {
		if !slices.ContainsFunc(patterns, func(pat *regexp.Regexp) bool { return pat.MatchString(s) }) {
			t.Errorf("%s: the pipeline file table names %q, a summary walcast does not have", page, s)
		}
	}
	for _, q := range quoted {
		for _, p := range strings.Split(q, "…") {
			p = strings.Trim(p, " :;,.()'\"")
			if len(p) < 8 {
				continue
			}
			if !slices.ContainsFunc(code, func(c string) bool { return strings.Contains(c, p) }) {
				t.Errorf("%s quotes %q, which no string of the code says (from %q)", page, p, q)
			}
		}
	}
	if checked < 60 || len(quoted) < 40 {
		t.Fatalf("checked %d messages of the code and %d quoted on the page; did either move?", checked, len(quoted))
	}
}

// minQuoted is how long a piece of a message must be for the page to be
// expected to quote it: shorter ones are words that any message has.
const minQuoted = 12

// messageCells returns the cells of row that quote what walcast says:
// the column headed summary, message or "what walcast says".
func messageCells(lines []string, row []string) string {
	for i, l := range lines {
		if !strings.HasPrefix(l, "|") || i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "|---") {
			continue
		}
		for j, h := range strings.Split(strings.Trim(l, "|"), "|") {
			h = strings.TrimSpace(h)
			if (h == "summary" || h == "message" || strings.HasPrefix(h, "what walcast says")) && j < len(row) {
				return row[j]
			}
		}
	}
	return ""
}

// summaryPattern matches the summaries a diagnostic can have: its pieces
// with anything between them ("Invalid " + attribute name). A page writes
// what goes in between as a name or as "…". Nil for a summary with no
// literal part (the helper that takes one as an argument).
func summaryPattern(pieces []string) *regexp.Regexp {
	if len(strings.TrimSpace(strings.Join(pieces, ""))) == 0 {
		return nil
	}
	quoted := make([]string, len(pieces))
	for i, p := range pieces {
		quoted[i] = regexp.QuoteMeta(p)
	}
	pat := strings.Join(quoted, ".+")
	if strings.HasSuffix(pieces[len(pieces)-1], " ") {
		pat += ".+" // a name follows the last piece
	}
	return regexp.MustCompile("^" + pat + "$")
}
