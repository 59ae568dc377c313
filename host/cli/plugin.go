package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/walcast/walcast/host/internal/plugin/pluginlock"
	"github.com/walcast/walcast/host/internal/plugin/sinkclient"
)

// installTimeout bounds an install, builds and module downloads included.
const installTimeout = 15 * time.Minute

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
	fs := newFlags("plugin install", stderr)
	pluginDir := fs.String("plugin-dir", "", "directory to install into")
	name := fs.String("name", "", "sink type to install as (default: from the file name or the plugin itself)")
	pos, code, ok := parsePositionals(fs, args, stdout, stderr, "SOURCE")
	if !ok {
		return code
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
	fs := newFlags("plugin list", stderr)
	pluginDir := fs.String("plugin-dir", "", "directory searched first")
	if _, code, ok := parsePositionals(fs, args, stdout, stderr); !ok {
		return code
	}
	listed, err := pluginlock.List(uniqueDirs(sinkclient.SearchDirs(*pluginDir)))
	if err != nil {
		fmt.Fprintln(stderr, "walcast plugin list:", err)
		return 1
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tVERSION\tCHECKSUM\tPATH")
	code := 0
	for _, l := range listed {
		version := l.Version
		if version == "" {
			version = "-"
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
	fs := newFlags("plugin remove", stderr)
	pluginDir := fs.String("plugin-dir", "", "directory to remove from")
	pos, code, ok := parsePositionals(fs, args, stdout, stderr, "TYPE")
	if !ok {
		return code
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
