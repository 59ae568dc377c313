package pluginlock

import (
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/walcast/walcast/host/internal/plugin/sinkclient"
	"github.com/walcast/walcast/pluginkit"
)

// SourceKind says how Install obtains the plugin executable.
type SourceKind int

const (
	// SourceBinary is an executable file, copied as is.
	SourceBinary SourceKind = iota + 1
	// SourcePackageDir is a directory holding a Go main package, built
	// with `go build` run in that directory (so its own go.mod applies).
	SourcePackageDir
	// SourceModule is module/path@version, built with `go install`.
	SourceModule
)

// Source is what `walcast plugin install` was given, classified.
type Source struct {
	Kind SourceKind
	// Arg is an absolute path for SourceBinary and SourcePackageDir, and
	// module/path@version for SourceModule.
	Arg string
}

// ParseSource classifies arg. A path that exists wins over the
// module@version reading, so a local directory named like a module is
// still built from disk.
func ParseSource(arg string) (Source, error) {
	if arg == "" {
		return Source{}, errors.New("empty plugin source")
	}
	fi, err := os.Stat(arg)
	switch {
	case err == nil:
		abs, err := filepath.Abs(arg)
		if err != nil {
			return Source{}, fmt.Errorf("plugin source %s: %w", arg, err)
		}
		if fi.IsDir() {
			return Source{Kind: SourcePackageDir, Arg: abs}, nil
		}
		if !fi.Mode().IsRegular() {
			return Source{}, fmt.Errorf("plugin source %s: not a regular file or a directory", arg)
		}
		if fi.Mode().Perm()&0o111 == 0 {
			return Source{}, fmt.Errorf("plugin source %s: not executable", arg)
		}
		return Source{Kind: SourceBinary, Arg: abs}, nil
	case !errors.Is(err, fs.ErrNotExist):
		return Source{}, fmt.Errorf("plugin source: %w", err)
	}
	mod, ver, ok := strings.Cut(arg, "@")
	if !ok {
		if looksLikeModulePath(arg) {
			return Source{}, fmt.Errorf("plugin source %s: no such file or directory; to build a Go module, give a version: %s@latest or %s@vX.Y.Z", arg, arg, arg)
		}
		return Source{}, fmt.Errorf("plugin source %s: no such file or directory", arg)
	}
	if !looksLikeModulePath(mod) || ver == "" || strings.ContainsAny(ver, "@ \t") {
		return Source{}, fmt.Errorf("plugin source %s: not a file, a directory or module/path@version", arg)
	}
	return Source{Kind: SourceModule, Arg: arg}, nil
}

// looksLikeModulePath is a cheap pre-check that spares the user a `go
// install` for an obvious typo; the go command has the final word.
func looksLikeModulePath(s string) bool {
	if s == "" || strings.HasPrefix(s, ".") || strings.HasPrefix(s, "/") || strings.HasPrefix(s, "-") ||
		strings.ContainsAny(s, "\\ \t:") {
		return false
	}
	first, _, _ := strings.Cut(s, "/")
	return strings.Contains(first, ".")
}

// InstallOptions says where and how to install.
type InstallOptions struct {
	// Dir is the plugin directory, created (with its parents) when
	// missing.
	Dir string
	// Name is the sink type to install as. Empty means the source file's
	// name when it is walcast-sink-<type>, else the name the plugin
	// reports.
	Name string
	// Logger receives the plugin's logs while it is asked to describe
	// itself. Nil discards them.
	Logger *slog.Logger
	// Now stamps the lock entry. Nil means time.Now.
	Now func() time.Time
}

// Installed describes a finished install.
type Installed struct {
	Type  string
	Path  string
	Entry Entry
}

// describeTimeout bounds the handshake with a candidate plugin: a program
// that is not a plugin may never answer, and install should say so soon.
const describeTimeout = 30 * time.Second

// Install obtains the plugin executable from src (building it with the
// local Go toolchain when needed), checks that it is a walcast sink
// plugin by asking it to describe itself, puts it in opts.Dir as
// walcast-sink-<type> and records it in the directory's lock file. ctx
// bounds the whole install, builds included.
//
// The copy that is checked is the copy that is installed: the executable
// is first copied under a temporary name into opts.Dir, launched from
// there with its hash pinned, and only then renamed into place.
func Install(ctx context.Context, src Source, opts InstallOptions) (Installed, error) {
	if err := prepareDir(opts); err != nil {
		return Installed{}, err
	}
	binary, cleanup, err := obtain(ctx, src)
	if err != nil {
		return Installed{}, err
	}
	defer cleanup()

	staged, sum, err := stage(binary, opts.Dir)
	if err != nil {
		return Installed{}, fmt.Errorf("install plugin: copy %s into %s: %w", binary, opts.Dir, err)
	}
	defer os.Remove(staged) // a no-op once renamed into place

	dctx, cancel := context.WithTimeout(ctx, describeTimeout)
	defer cancel()
	info, err := sinkclient.Describe(dctx, sinkclient.Config{
		Path: staged, SinkID: "install", Logger: opts.Logger, SHA256: sum, Stdout: io.Discard,
	}, nil)
	if err != nil {
		return Installed{}, fmt.Errorf("install plugin: %s is not a walcast sink plugin: %w", src.Arg, err)
	}
	sinkType := typeOf(src, binary, opts.Name, info.Name)
	if err := checkType(sinkType); err != nil {
		return Installed{}, fmt.Errorf("install plugin: the plugin reports the name %q: %w; pass --name TYPE", info.Name, err)
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	entry := Entry{Version: info.Version, SHA256: sum, Source: builtFrom(src, binary), InstalledAt: now().UTC().Truncate(time.Second)}
	dest, err := place(opts.Dir, sinkType, staged, entry)
	if err != nil {
		return Installed{}, err
	}
	return Installed{Type: sinkType, Path: dest, Entry: entry}, nil
}

// prepareDir checks the options and creates the plugin directory when it
// is missing: a first install into a new directory is the usual case (a
// fresh machine, a directory named in WALCAST_PLUGIN_DIR beforehand).
func prepareDir(opts InstallOptions) error {
	if opts.Dir == "" {
		return errors.New("install plugin: no plugin directory")
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return fmt.Errorf("install plugin: create plugin directory: %w", err)
	}
	if fi, err := os.Stat(opts.Dir); err != nil {
		return fmt.Errorf("install plugin: plugin directory: %w", err)
	} else if !fi.IsDir() {
		return fmt.Errorf("install plugin: plugin directory %s is not a directory", opts.Dir)
	}
	if opts.Name != "" {
		if err := checkType(opts.Name); err != nil {
			return fmt.Errorf("install plugin: --name: %w", err)
		}
	}
	return nil
}

// typeOf is the sink type a plugin installs as: the --name given, else
// the type in the name of the binary given or built
// (walcast-sink-TYPE), else the name the plugin reports.
func typeOf(src Source, binary, name, reported string) string {
	if name != "" {
		return name
	}
	prefix := sinkclient.ExecutableName("")
	switch src.Kind {
	case SourceBinary:
		if t, ok := strings.CutPrefix(filepath.Base(src.Arg), prefix); ok && t != "" {
			return t
		}
	case SourceModule:
		if t, ok := strings.CutPrefix(filepath.Base(binary), prefix); ok && t != "" {
			return t
		}
	}
	return reported
}

// place renames the staged binary into place as the plugin of sinkType
// and records entry in the lock file, both under the directory's lock, so
// that concurrent installs keep every entry and each entry pins the
// binary that is actually in place. It returns the binary's path.
func place(dir, sinkType, staged string, entry Entry) (string, error) {
	dest := filepath.Join(dir, sinkclient.ExecutableName(sinkType))
	unlock, err := lockDir(dir)
	if err != nil {
		return "", fmt.Errorf("install plugin %s: %w", sinkType, err)
	}
	defer unlock()
	if err := os.Rename(staged, dest); err != nil {
		return "", fmt.Errorf("install plugin %s: %w", sinkType, err)
	}
	lock, err := Read(dir)
	if err == nil {
		lock.Plugins[sinkType] = entry
		err = Write(dir, lock)
	}
	if err != nil {
		// Fail closed: a previous entry (if any) still pins the old hash,
		// so the new binary is refused until the lock is written.
		return "", fmt.Errorf("install plugin %s: %s is in place but not recorded, re-run the install: %w", sinkType, dest, err)
	}
	return dest, nil
}

// builtFrom is the lock entry's Source: src.Arg, except that a module
// query (@latest, @main, a version prefix) is replaced by the version the
// go command resolved it to, read from the binary's build information, so
// that the lock says what was built and the install can be repeated.
func builtFrom(src Source, binary string) string {
	if src.Kind != SourceModule {
		return src.Arg
	}
	bi, err := buildinfo.ReadFile(binary)
	if err != nil || bi.Path == "" || bi.Main.Version == "" || bi.Main.Version == "(devel)" {
		return src.Arg
	}
	return bi.Path + "@" + bi.Main.Version
}

// checkType rejects what cannot be a sink type (pluginkit.ValidTypeName),
// the same rule a pipeline's sink block is checked with.
func checkType(t string) error {
	if !pluginkit.ValidTypeName(t) {
		return fmt.Errorf("sink type %q: plugin types use lower-case letters, digits, '_' and '-', start with a letter or digit, and are at most 64 characters long", t)
	}
	return nil
}

// obtain returns the path of an executable for src, building it into a
// temporary directory when src is Go source; cleanup removes that
// directory.
func obtain(ctx context.Context, src Source) (path string, cleanup func(), err error) {
	if src.Kind == SourceBinary {
		return src.Arg, func() {}, nil
	}
	tmp, err := os.MkdirTemp("", "walcast-plugin-build-")
	if err != nil {
		return "", nil, fmt.Errorf("install plugin: %w", err)
	}
	cleanup = func() { os.RemoveAll(tmp) }
	switch src.Kind {
	case SourcePackageDir:
		out := filepath.Join(tmp, "plugin")
		// Run in the package directory so that its own module (go.mod,
		// replace directives, vendor) governs the build.
		if err := goCmd(ctx, src.Arg, nil, "build", "-o", out, "."); err != nil {
			cleanup()
			return "", nil, fmt.Errorf("install plugin: build %s: %w", src.Arg, err)
		}
		return out, cleanup, nil
	case SourceModule:
		bin := filepath.Join(tmp, "bin")
		if err := os.Mkdir(bin, 0o755); err != nil {
			cleanup()
			return "", nil, fmt.Errorf("install plugin: %w", err)
		}
		// Run outside any module: `go install mod@version` ignores the
		// current one anyway, and tmp cannot have a go.work around it.
		if err := goCmd(ctx, tmp, []string{"GOBIN=" + bin, "GOWORK=off"}, "install", src.Arg); err != nil {
			cleanup()
			return "", nil, fmt.Errorf("install plugin: go install %s: %w", src.Arg, err)
		}
		entries, err := os.ReadDir(bin)
		if err != nil || len(entries) != 1 {
			cleanup()
			return "", nil, fmt.Errorf("install plugin: go install %s produced %d files in GOBIN, want one executable (cross-compiling?)", src.Arg, len(entries))
		}
		return filepath.Join(bin, entries[0].Name()), cleanup, nil
	}
	cleanup()
	return "", nil, fmt.Errorf("install plugin: unknown source kind %d", src.Kind)
}

// goCmd runs the local go command in dir and puts its output into the
// error when it fails, since that output is the compiler's diagnosis.
func goCmd(ctx context.Context, dir string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if len(out) > 0 {
			return fmt.Errorf("%w\n%s", err, strings.TrimRight(string(out), "\n"))
		}
		return err
	}
	return nil
}

// stage copies binary into dir under a temporary name, executable, and
// returns that name and the hex SHA-256 of what was written.
func stage(binary, dir string) (string, string, error) {
	in, err := os.Open(binary)
	if err != nil {
		return "", "", err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(dir, ".walcast-sink-install-*")
	if err != nil {
		return "", "", err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(tmp, h), in)
	if err == nil {
		err = tmp.Chmod(0o755)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", "", err
	}
	return tmp.Name(), hex.EncodeToString(h.Sum(nil)), nil
}

// Remove deletes the plugin installed as sinkType in dir and its lock
// entry. It refuses a plugin the lock file does not know, such as a
// built-in sink put there by `make build`: remove only undoes install.
func Remove(dir, sinkType string) (string, error) {
	if err := checkType(sinkType); err != nil {
		return "", fmt.Errorf("remove plugin: %w", err)
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return "", fmt.Errorf("remove plugin %s: %w", sinkType, err)
	}
	defer unlock()
	lock, err := Read(dir)
	if err != nil {
		return "", fmt.Errorf("remove plugin %s: %w", sinkType, err)
	}
	path := filepath.Join(dir, sinkclient.ExecutableName(sinkType))
	if _, ok := lock.Plugins[sinkType]; !ok {
		if _, err := os.Stat(path); err == nil {
			return "", fmt.Errorf("remove plugin %s: %s was not installed with `walcast plugin install` (no entry in %s); delete it by hand if you mean to", sinkType, path, Path(dir))
		}
		return "", fmt.Errorf("remove plugin %s: not installed in %s", sinkType, dir)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("remove plugin %s: %w", sinkType, err)
	}
	delete(lock.Plugins, sinkType)
	if err := Write(dir, lock); err != nil {
		return "", fmt.Errorf("remove plugin %s: %w", sinkType, err)
	}
	return path, nil
}

// Status is how an installed plugin compares with its lock entry.
type Status string

const (
	StatusOK       Status = "ok"       // the hash matches the lock entry
	StatusMismatch Status = "MISMATCH" // the hash differs: walcast refuses to run it
	StatusUnlocked Status = "unlocked" // no lock entry: runs unverified
	StatusMissing  Status = "missing"  // a lock entry without its executable
)

// Listed is one plugin as List sees it.
type Listed struct {
	Type string
	// Version is the lock entry's; for an unlocked plugin, the module
	// version in the executable's Go build information (what a pluginkit
	// plugin reports), or "" when it has none.
	Version string
	Status  Status
	Path    string
}

// List returns the plugins walcast would use from dirs, searched in order
// like sinkclient.Find (the first directory holding a type wins), sorted
// by type, each compared with its directory's lock file.
func List(dirs []string) ([]Listed, error) {
	seen := map[string]bool{}
	var out, missing []Listed
	for _, dir := range dirs {
		lock, err := Read(dir)
		if err != nil {
			return nil, fmt.Errorf("list plugins: %w", err)
		}
		matches, err := filepath.Glob(filepath.Join(dir, sinkclient.ExecutableName("*")))
		if err != nil {
			return nil, fmt.Errorf("list plugins: %w", err)
		}
		for _, path := range matches {
			fi, err := os.Stat(path)
			if err != nil || fi.IsDir() {
				continue
			}
			t := strings.TrimPrefix(filepath.Base(path), sinkclient.ExecutableName(""))
			if seen[t] {
				continue
			}
			seen[t] = true
			l := Listed{Type: t, Path: path, Status: StatusUnlocked}
			if bi, err := buildinfo.ReadFile(path); err == nil {
				l.Version = bi.Main.Version
			}
			if e, ok := lock.Plugins[t]; ok {
				l.Version = e.Version
				sum, err := FileSHA256(path)
				if err != nil {
					return nil, fmt.Errorf("list plugins: %w", err)
				}
				l.Status = StatusOK
				if sum != e.SHA256 {
					l.Status = StatusMismatch
				}
			}
			out = append(out, l)
		}
		for t, e := range lock.Plugins {
			missing = append(missing, Listed{Type: t, Version: e.Version, Status: StatusMissing, Path: filepath.Join(dir, sinkclient.ExecutableName(t))})
		}
	}
	// A lock entry whose executable is gone only matters when no directory
	// provides the type at all.
	for _, m := range missing {
		if !seen[m.Type] {
			seen[m.Type] = true
			out = append(out, m)
		}
	}
	sortListed(out)
	return out, nil
}

func sortListed(ls []Listed) {
	slices.SortFunc(ls, func(a, b Listed) int { return strings.Compare(a.Type, b.Type) })
}
