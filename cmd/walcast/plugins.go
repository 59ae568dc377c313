package main

import (
	"io"
	"log/slog"

	"github.com/walcast/walcast/host/daemon"
	"github.com/walcast/walcast/host/sinkclient"
)

func newPluginSet(flagDir string, log *slog.Logger, stdout io.Writer) *daemon.PluginSet {
	return &daemon.PluginSet{Dirs: sinkclient.SearchDirs(flagDir), Logger: log, Stdout: stdout}
}
