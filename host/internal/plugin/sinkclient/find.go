package sinkclient

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// EnvPluginDir names a directory searched for plugins after the one given
// on the command line.
const EnvPluginDir = "WALCAST_PLUGIN_DIR"

// ExecutableName is the file name of the plugin for a sink type.
func ExecutableName(sinkType string) string { return "walcast-sink-" + sinkType }

// SearchDirs returns the directories Find searches, in order: flagDir when
// set, then $WALCAST_PLUGIN_DIR when set, then the directory holding the
// walcast executable (where `make build` puts the built-in sinks).
func SearchDirs(flagDir string) []string {
	var dirs []string
	if flagDir != "" {
		dirs = append(dirs, flagDir)
	}
	if d := os.Getenv(EnvPluginDir); d != "" {
		dirs = append(dirs, d)
	}
	if exe, err := os.Executable(); err == nil {
		if resolved, err := filepath.EvalSymlinks(exe); err == nil {
			exe = resolved
		}
		dirs = append(dirs, filepath.Dir(exe))
	}
	return dirs
}

// Find returns the path of the executable walcast-sink-<sinkType> in the
// first of dirs that holds one. When none does, the error names every path
// tried and how to get the plugin there.
func Find(sinkType string, dirs []string) (string, error) {
	if sinkType == "" || strings.ContainsAny(sinkType, `/\`) || sinkType == "." || sinkType == ".." {
		return "", fmt.Errorf("find sink plugin: invalid sink type %q", sinkType)
	}
	name := ExecutableName(sinkType)
	var tried []string
	for _, dir := range dirs {
		path := filepath.Join(dir, name)
		tried = append(tried, path)
		fi, err := os.Stat(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return "", fmt.Errorf("find sink plugin %q: %w", sinkType, err)
		case fi.IsDir():
			continue
		case fi.Mode().Perm()&0o111 == 0:
			return "", fmt.Errorf("find sink plugin %q: %s is not executable (chmod +x it, or reinstall it with `walcast plugin install`)", sinkType, path)
		}
		return path, nil
	}
	if len(tried) == 0 {
		return "", fmt.Errorf("find sink plugin %q: no plugin directory to search; pass --plugin-dir or set %s", sinkType, EnvPluginDir)
	}
	return "", fmt.Errorf("find sink plugin %q: no executable %s in any of:\n  %s\n"+
		"build the built-in sinks with `make build` (they go next to the walcast binary), "+
		"install a third-party sink with `walcast plugin install SOURCE`, "+
		"or point --plugin-dir or %s at the directory that holds it",
		sinkType, name, strings.Join(tried, "\n  "), EnvPluginDir)
}
