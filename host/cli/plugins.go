package cli

import (
	"io"
	"log/slog"
	"path/filepath"
	"slices"

	"github.com/walcast/walcast/host/internal/daemon"
	"github.com/walcast/walcast/host/internal/plugin/sinkclient"
)

func newPluginSet(flagDir string, log *slog.Logger, stdout io.Writer) *daemon.PluginSet {
	return &daemon.PluginSet{Dirs: uniqueDirs(sinkclient.SearchDirs(flagDir)), Logger: log, Stdout: stdout}
}

// uniqueDirs drops repeated directories ($WALCAST_PLUGIN_DIR is often the
// walcast executable's own), so that a "plugin not found" error lists each
// path once.
func uniqueDirs(dirs []string) []string {
	out := dirs[:0:0]
	for _, d := range dirs {
		if !slices.Contains(out, filepath.Clean(d)) {
			out = append(out, filepath.Clean(d))
		}
	}
	return out
}
