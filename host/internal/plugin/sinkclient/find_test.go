package sinkclient

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFind(t *testing.T) {
	empty := t.TempDir()
	if got, err := Find("webhook", []string{empty, binDir}); err != nil || got != filepath.Join(binDir, "walcast-sink-webhook") {
		t.Errorf("Find = %q, %v", got, err)
	}

	other := t.TempDir()
	_, err := Find("nosuch", []string{empty, other})
	if err == nil {
		t.Fatal("Find found a plugin that does not exist")
	}
	for _, want := range []string{
		filepath.Join(empty, "walcast-sink-nosuch"),
		filepath.Join(other, "walcast-sink-nosuch"),
		"make build",
		"walcast plugin install",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}

	notExec := filepath.Join(other, "walcast-sink-text")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Find("text", []string{other}); err == nil || !strings.Contains(err.Error(), "not executable") {
		t.Errorf("Find on a non-executable file = %v", err)
	}

	for _, bad := range []string{"", "../x", "a/b", ".."} {
		if _, err := Find(bad, []string{binDir}); err == nil {
			t.Errorf("Find(%q) succeeded", bad)
		}
	}
}

func TestSearchDirs(t *testing.T) {
	t.Setenv(EnvPluginDir, "/opt/walcast/plugins")
	dirs := SearchDirs("/from/flag")
	if len(dirs) != 3 || dirs[0] != "/from/flag" || dirs[1] != "/opt/walcast/plugins" {
		t.Fatalf("SearchDirs = %q", dirs)
	}
	exe, _ := os.Executable()
	exe, _ = filepath.EvalSymlinks(exe)
	if dirs[2] != filepath.Dir(exe) {
		t.Errorf("last dir = %q, want the executable's %q", dirs[2], filepath.Dir(exe))
	}

	t.Setenv(EnvPluginDir, "")
	if dirs := SearchDirs(""); len(dirs) != 1 {
		t.Errorf("SearchDirs without flag or env = %q", dirs)
	}
}
