package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/walcast/walcast/host/internal/config"
)

func cmdValidate(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("validate", stderr)
	pluginDir := fs.String("plugin-dir", "", "directory holding walcast-sink-* plugins")
	path, code, ok := parseArgs(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	p, diags := config.Load(path)
	// p holds whatever decoded even when diags has errors, so the sinks'
	// plugins are checked too and one run reports every problem.
	if p != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		diags = append(diags, config.Check(ctx, p, newPluginSet(*pluginDir, log, io.Discard))...)
	}
	if len(diags) > 0 {
		fmt.Fprint(stderr, config.FormatDiagnostics(diags))
	}
	if diags.HasErrors() {
		return 1
	}
	sinks := "sinks"
	if len(p.Sinks) == 1 {
		sinks = "sink"
	}
	fmt.Fprintf(stdout, "%s: pipeline %q is valid (%d %s)\n", path, p.Name, len(p.Sinks), sinks)
	return 0
}
