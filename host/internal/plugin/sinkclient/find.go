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
	if near := nearestType(sinkType, dirs); near != "" {
		return "", fmt.Errorf("find sink plugin %q: there is no sink type %q; did you mean %q? (no executable %s in any of: %s)",
			sinkType, sinkType, near, name, strings.Join(tried, ", "))
	}
	return "", fmt.Errorf("find sink plugin %q: no executable %s in any of:\n  %s\n"+
		"build the built-in sinks with `make build` (they go next to the walcast binary), "+
		"install a third-party sink with `walcast plugin install SOURCE`, "+
		"or point --plugin-dir or %s at the directory that holds it",
		sinkType, name, strings.Join(tried, "\n  "), EnvPluginDir)
}

// nearestType is the sink type installed in dirs whose name is closest to
// sinkType, when it is close enough to be a typo (fewer than three edits,
// as HCL suggests attribute names); "" otherwise.
func nearestType(sinkType string, dirs []string) string {
	best, bestDist := "", 3
	for _, dir := range dirs {
		matches, _ := filepath.Glob(filepath.Join(dir, ExecutableName("*")))
		for _, m := range matches {
			t := strings.TrimPrefix(filepath.Base(m), ExecutableName(""))
			if d := editDistance(sinkType, t); d < bestDist {
				best, bestDist = t, d
			}
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in runes.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur := make([]int, len(rb)+1)
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(rb)]
}
