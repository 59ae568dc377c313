package cli

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"text/template"

	"github.com/walcast/walcast/pluginkit"
)

// skeleton holds the files `walcast plugin new` writes, as templates.
//
//go:embed skeleton/*.tmpl
var skeleton embed.FS

// Module paths of the SDK and what it requires, as a sink's go.mod names
// them.
const (
	pluginkitModule = "github.com/walcast/walcast/pluginkit"
	cdcModule       = "github.com/walcast/walcast/pluginkit/cdc"
	protoModule     = "github.com/walcast/walcast/proto"
)

// skeletonGoVersion is the go directive of a new sink's module: the one of
// pluginkit's own go.mod, the oldest Go that builds the SDK (a test keeps
// them equal).
const skeletonGoVersion = "1.22"

// unreleased is the version a go.mod requires a module at when a replace
// directive supplies it.
const unreleased = "v0.0.0-00010101000000-000000000000"

// skeletonData fills the templates.
type skeletonData struct {
	Name, Module, GoVersion, Version string
	// Src is a walcast checkout the go.mod points pluginkit at with
	// replace directives, as the documented recipe does; "" to require
	// the released Version.
	Src string
}

func cmdPluginNew(args []string, stdout, stderr io.Writer) int {
	fset := newFlags("plugin new", stderr)
	module := fset.String("module", "", "the new module's path (default example.com/walcast-sink-NAME)")
	src := fset.String("walcast-src", "", "a checkout of github.com/walcast/walcast: the module builds against its pluginkit\n(replace directives), as docs/writing-a-sink.md does before pluginkit's first release")
	version := fset.String("pluginkit-version", "", "the pluginkit release to require, such as v1.0.0 (default: the one this walcast was built with)")
	tidy := fset.Bool("tidy", true, "run go mod tidy in the new module, so that it builds at once")
	pos, code, ok := parseAll(fset, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) < 1 || len(pos) > 2 {
		fmt.Fprintf(stderr, "walcast plugin new: want NAME and optionally DIR, got %d arguments\n\n", len(pos))
		printHelp(stderr, fset)
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "walcast plugin new: "+format+"\n", a...)
		return 1
	}
	name := pos[0]
	if !pluginkit.ValidTypeName(name) {
		return fail("%q is not a sink type: use lower-case letters, digits, '_' and '-', starting with a letter or digit (it is the name in sink \"NAME\" \"id\" and in walcast-sink-NAME)", name)
	}
	dir := "walcast-sink-" + name
	if len(pos) == 2 {
		dir = pos[1]
	}
	data := skeletonData{Name: name, Module: *module, GoVersion: skeletonGoVersion, Version: *version}
	if data.Module == "" {
		data.Module = "example.com/walcast-sink-" + name
	}
	if err := resolveSDK(&data, *src); err != nil {
		return fail("%v", err)
	}
	if err := writeSkeleton(dir, data); err != nil {
		return fail("%v", err)
	}
	fmt.Fprintf(stdout, "created sink %q in %s (module %s)\n", name, dir, data.Module)
	if *tidy {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		cmd := exec.CommandContext(ctx, "go", "mod", "tidy")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fail("go mod tidy in %s: %v\n%s\nthe files are written: fix the problem and run go mod tidy there yourself", dir, err, bytes.TrimSpace(out))
		}
	}
	tidyStep := ""
	if !*tidy {
		tidyStep = "  go mod tidy\n"
	}
	fmt.Fprintf(stdout, "next:\n  cd %s\n%s  go test ./...\n  go build -o walcast-sink-%s .\n  walcast plugin test ./walcast-sink-%s --config '{\"path\":\"/tmp/%s.jsonl\"}'\n  walcast plugin install .\n",
		dir, tidyStep, name, name, name)
	return 0
}

// resolveSDK decides how the new module gets pluginkit: from the walcast
// checkout src, else at a release.
func resolveSDK(data *skeletonData, src string) error {
	if src != "" {
		abs, err := filepath.Abs(src)
		if err != nil {
			return err
		}
		if err := checkCheckout(abs); err != nil {
			return err
		}
		data.Src, data.Version = goModPath(abs), unreleased
		return nil
	}
	if data.Version == "" {
		data.Version = builtPluginkit()
	}
	if data.Version == "" {
		return errors.New("this walcast was not built with a released pluginkit, so there is no version to require: " +
			"pass --walcast-src DIR with a checkout of github.com/walcast/walcast to build against its pluginkit, " +
			"or --pluginkit-version vX.Y.Z (docs/writing-a-sink.md)")
	}
	if !releaseRE.MatchString(data.Version) {
		return fmt.Errorf("--pluginkit-version %q is not a release version such as v1.2.0", data.Version)
	}
	return nil
}

// checkCheckout checks that dir holds walcast's SDK modules.
func checkCheckout(dir string) error {
	for mod, file := range map[string]string{
		pluginkitModule: "pluginkit/go.mod", cdcModule: "pluginkit/cdc/go.mod", protoModule: "proto/go.mod",
	} {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil || !bytes.Contains(b, []byte("module "+mod+"\n")) {
			return fmt.Errorf("--walcast-src %s is not a checkout of github.com/walcast/walcast with the SDK modules (%s declaring %s): pass the directory you cloned walcast into", dir, file, mod)
		}
	}
	return nil
}

// goModPath writes a file path for a go.mod directive, quoted when it
// needs to be.
func goModPath(p string) string {
	if strings.ContainsAny(p, " \t\"'`\\") {
		return strconv.Quote(p)
	}
	return p
}

// releaseRE matches a release or pre-release version; pseudo-versions
// (v0.0.0-20240101000000-abcdefabcdef) do not name a release.
var (
	releaseRE = regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.]+)?$`)
	pseudoRE  = regexp.MustCompile(`\d{14}-[0-9a-f]{12}$`)
)

// builtPluginkit returns the pluginkit release this binary was built
// with, or "" when it was built against a checkout (replaced, or a
// pseudo-version).
func builtPluginkit() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range bi.Deps {
		if d.Path == pluginkitModule && d.Replace == nil && releaseRE.MatchString(d.Version) && !pseudoRE.MatchString(d.Version) {
			return d.Version
		}
	}
	return ""
}

// writeSkeleton writes the templates into dir, which must not exist or be
// empty: nothing of the user's is ever overwritten.
func writeSkeleton(dir string, data skeletonData) error {
	entries, err := os.ReadDir(dir)
	switch {
	case err == nil && len(entries) > 0:
		return fmt.Errorf("%s already exists and is not empty; pass another DIR", dir)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	files, err := fs.Glob(skeleton, "skeleton/*.tmpl")
	if err != nil {
		return err
	}
	for _, f := range files {
		tmpl, err := template.ParseFS(skeleton, f)
		if err != nil {
			return fmt.Errorf("skeleton %s: %w", f, err)
		}
		var out bytes.Buffer
		if err := tmpl.Execute(&out, data); err != nil {
			return fmt.Errorf("skeleton %s: %w", f, err)
		}
		name := strings.TrimSuffix(filepath.Base(f), ".tmpl")
		if err := os.WriteFile(filepath.Join(dir, name), out.Bytes(), 0o644); err != nil {
			return err
		}
	}
	return nil
}
