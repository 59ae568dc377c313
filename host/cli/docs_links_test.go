package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// A reader follows links: every relative link of the docs must reach a
// file, and its #anchor a heading of that file, or the docs are a maze.

var (
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	inlineCode = regexp.MustCompile("`[^`]*`")
	heading    = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
)

// mdPage is what the link check needs of one Markdown file: its links
// (with their line) and the anchors of its headings.
type mdPage struct {
	links   []mdLinkAt
	anchors map[string]bool
	// texts are the headings and link texts, for code that cites a
	// section by name ("Roles and grants" in docs/operations.md).
	texts []string
}

type mdLinkAt struct {
	target string
	line   int
}

var linkText = regexp.MustCompile(`\[([^\]]+)\]\(`)

// readPage reads path's links and headings, outside fenced code blocks
// and code spans.
func readPage(t *testing.T, path string) mdPage {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p := mdPage{anchors: map[string]bool{}}
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	fenced := false
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if m := heading.FindStringSubmatch(l); m != nil {
			slug := anchorOf(m[2])
			if k := seen[slug]; k > 0 {
				p.anchors[fmt.Sprintf("%s-%d", slug, k)] = true
			} else {
				p.anchors[slug] = true
			}
			seen[slug]++
			p.texts = append(p.texts, strings.ReplaceAll(m[2], "`", ""))
		}
		for _, m := range linkText.FindAllStringSubmatch(l, -1) {
			p.texts = append(p.texts, strings.ReplaceAll(m[1], "`", ""))
		}
		for _, m := range mdLink.FindAllStringSubmatch(inlineCode.ReplaceAllString(l, ""), -1) {
			p.links = append(p.links, mdLinkAt{m[1], n})
		}
	}
	return p
}

// anchorOf is the anchor GitHub gives a heading: lower case, punctuation
// but '-' and '_' dropped, each space a '-'.
func anchorOf(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestDocLinks checks every relative link of README.md, docs/ and the
// examples' READMEs: its file exists and its anchor is a heading there.
func TestDocLinks(t *testing.T) {
	root := repoRoot(t)
	files := docFiles(t)
	examples, _ := filepath.Glob("../../examples/*/README.md")
	files = append(files, examples...)
	pages := map[string]mdPage{}
	page := func(path string) mdPage {
		if p, ok := pages[path]; ok {
			return p
		}
		p := readPage(t, path)
		pages[path] = p
		return p
	}
	n := 0
	for _, f := range files {
		abs, _ := filepath.Abs(f)
		rel, _ := filepath.Rel(root, abs)
		for _, l := range page(abs).links {
			if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
				continue
			}
			n++
			file, anchor, _ := strings.Cut(l.target, "#")
			target := abs
			if file != "" {
				target = filepath.Join(filepath.Dir(abs), filepath.FromSlash(file))
			}
			if !strings.HasPrefix(target, root+string(filepath.Separator)) {
				t.Errorf("%s:%d: link %s leaves the repository", rel, l.line, l.target)
				continue
			}
			st, err := os.Stat(target)
			if err != nil {
				t.Errorf("%s:%d: link %s: no such file", rel, l.line, l.target)
				continue
			}
			if anchor == "" {
				continue
			}
			if st.IsDir() || !strings.HasSuffix(target, ".md") {
				t.Errorf("%s:%d: link %s: an anchor into a file that is not Markdown", rel, l.line, l.target)
				continue
			}
			if !page(target).anchors[anchor] {
				t.Errorf("%s:%d: link %s: %s has no heading with the anchor #%s", rel, l.line, l.target, file, anchor)
			}
		}
	}
	if n < 100 {
		t.Fatalf("only %d relative links checked; did the docs move?", n)
	}
}

// docCitation is a doc cited by a message or comment of the code:
// `see "Roles and grants" in docs/operations.md`.
var (
	docCitation = regexp.MustCompile(`"([^"]+)" in (docs/[a-z0-9/_-]+\.md)`)
	docPath     = regexp.MustCompile(`\bdocs/[a-z0-9/_-]+\.md\b`)
)

// TestCodeCitesDocs checks what walcast's messages tell a user to read:
// every docs/… page a string of the code names exists, and a section it
// names is a heading or a link on that page.
func TestCodeCitesDocs(t *testing.T) {
	root := repoRoot(t)
	n := 0
	for _, dir := range []string{"host", "cmd", "plugins", "pluginkit"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			fset := token.NewFileSet()
			file, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			ast.Inspect(file, func(node ast.Node) bool {
				lit, ok := node.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					return true
				}
				at := fmt.Sprintf("%s:%d", rel, fset.Position(lit.Pos()).Line)
				for _, doc := range docPath.FindAllString(s, -1) {
					n++
					if _, err := os.Stat(filepath.Join(root, doc)); err != nil {
						t.Errorf("%s: the code points readers at %s, which does not exist", at, doc)
					}
				}
				for _, m := range docCitation.FindAllStringSubmatch(s, -1) {
					if _, err := os.Stat(filepath.Join(root, m[2])); err != nil {
						continue // reported above
					}
					found := false
					for _, text := range readPage(t, filepath.Join(root, m[2])).texts {
						found = found || strings.EqualFold(text, m[1])
					}
					if !found {
						t.Errorf("%s: the code sends readers to %q in %s, which has no heading or link of that name", at, m[1], m[2])
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n == 0 {
		t.Fatal("no string of the code names a page of docs/; did the check break?")
	}
}
