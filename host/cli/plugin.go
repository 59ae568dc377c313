package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/walcast/walcast/host/internal/pluginlock"
	"github.com/walcast/walcast/host/internal/sinkclient"
)

const pluginUsage = `Usage:
  walcast plugin install SOURCE [--plugin-dir DIR] [--name TYPE]
  walcast plugin list [--plugin-dir DIR]
  walcast plugin remove TYPE [--plugin-dir DIR]

SOURCE is an executable, a directory holding a Go main package, or
module/path@version (both built with the local go command).
`

// installTimeout bounds an install, builds and module downloads included.
const installTimeout = 15 * time.Minute

func cmdPlugin(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, pluginUsage)
		return 2
	}
	switch args[0] {
	case "install":
		return cmdPluginInstall(args[1:], stdout, stderr)
	case "list":
		return cmdPluginList(args[1:], stdout, stderr)
	case "remove":
		return cmdPluginRemove(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, pluginUsage)
		return 0
	}
	fmt.Fprintf(stderr, "walcast plugin: unknown command %q\n\n%s", args[0], pluginUsage)
	return 2
}

// installDir is where install and remove act: the first directory the
// host searches, so that what was installed is what runs.
func installDir(flagDir string) (string, error) {
	dirs := sinkclient.SearchDirs(flagDir)
	if len(dirs) == 0 {
		return "", fmt.Errorf("no plugin directory: pass --plugin-dir or set %s", sinkclient.EnvPluginDir)
	}
	return dirs[0], nil
}

func cmdPluginInstall(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("plugin install", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pluginDir := fs.String("plugin-dir", "", "directory to install into")
	name := fs.String("name", "", "sink type to install as (default: from the file name or the plugin itself)")
	pos, ok := parsePositionals(fs, args, stderr, "SOURCE")
	if !ok {
		return 2
	}
	src, err := pluginlock.ParseSource(pos[0])
	if err != nil {
		fmt.Fprintln(stderr, "walcast plugin install:", err)
		return 1
	}
	dir, err := installDir(*pluginDir)
	if err != nil {
		fmt.Fprintln(stderr, "walcast plugin install:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, installTimeout)
	defer cancel()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	inst, err := pluginlock.Install(ctx, src, pluginlock.InstallOptions{Dir: dir, Name: *name, Logger: log})
	if err != nil {
		fmt.Fprintln(stderr, "walcast plugin install:", err)
		return 1
	}
	fmt.Fprintf(stdout, "installed %s %s sha256:%s into %s\n", inst.Type, inst.Entry.Version, inst.Entry.SHA256, dir)
	return 0
}

// cmdPluginList exits 1 when a locked plugin's hash differs, since walcast
// would refuse to run it; scripts can check that without parsing.
func cmdPluginList(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("plugin list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pluginDir := fs.String("plugin-dir", "", "directory searched first")
	if _, ok := parsePositionals(fs, args, stderr); !ok {
		return 2
	}
	listed, err := pluginlock.List(uniqueDirs(sinkclient.SearchDirs(*pluginDir)))
	if err != nil {
		fmt.Fprintln(stderr, "walcast plugin list:", err)
		return 1
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tVERSION\tSHA256\tPATH")
	code := 0
	for _, l := range listed {
		version := l.Version
		if l.Status == pluginlock.StatusUnlocked {
			version = "unlocked"
		}
		if l.Status == pluginlock.StatusMismatch {
			code = 1
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", l.Type, version, l.Status, l.Path)
	}
	if err := tw.Flush(); err != nil {
		fmt.Fprintln(stderr, "walcast plugin list:", err)
		return 1
	}
	return code
}

func cmdPluginRemove(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("plugin remove", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pluginDir := fs.String("plugin-dir", "", "directory to remove from")
	pos, ok := parsePositionals(fs, args, stderr, "TYPE")
	if !ok {
		return 2
	}
	dir, err := installDir(*pluginDir)
	if err != nil {
		fmt.Fprintln(stderr, "walcast plugin remove:", err)
		return 1
	}
	path, err := pluginlock.Remove(dir, pos[0])
	if err != nil {
		fmt.Fprintln(stderr, "walcast plugin remove:", err)
		return 1
	}
	fmt.Fprintf(stdout, "removed %s (%s)\n", pos[0], path)
	return 0
}

// parsePositionals is parseArgs for a fixed list of named positional
// arguments (possibly none), flags allowed before, between and after them.
func parsePositionals(fs *flag.FlagSet, args []string, stderr io.Writer, names ...string) ([]string, bool) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, false
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(positional) != len(names) {
		want := "no arguments"
		if len(names) > 0 {
			want = "exactly one " + strings.Join(names, " ") + " argument"
		}
		fmt.Fprintf(stderr, "walcast %s: want %s, got %d arguments\n\n%s", fs.Name(), want, len(positional), pluginUsage)
		return nil, false
	}
	return positional, true
}
