package cli

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/walcast/walcast/host/internal/config"
	"github.com/walcast/walcast/host/internal/daemon"
)

func cmdRun(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("run", stderr)
	pluginDir := fs.String("plugin-dir", "", "directory holding walcast-sink-* plugins")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "text or json")
	shutdown := fs.Duration("shutdown-timeout", 0, "how long in-flight deliveries may take after SIGTERM (default 30s)")
	metrics := fs.String("metrics-listen", "", "serve Prometheus /metrics and /healthz on this address, e.g. 127.0.0.1:9187")
	acceptGap := fs.Bool("accept-gap", false, "when the slot was lost, invalidated or belongs to another cluster, or its publication was dropped: create a new slot and record the gap instead of refusing to start")
	warnWAL := fs.Int64("warn-retained-wal-mb", 1024, "warn (log and walcast_slot_wal_at_risk) when the slot retains more WAL than this many MiB; wal_status unreserved always warns")
	slotCheck := fs.Duration("slot-check-interval", 10*time.Second, "how often the slot's retained WAL is checked")
	path, code, ok := parseArgs(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	log, err := newLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		fmt.Fprintln(stderr, "walcast run:", err)
		return 2
	}
	p, diags := config.Load(path)
	if diags.HasErrors() {
		fmt.Fprint(stderr, config.FormatDiagnostics(diags))
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	plugins := newPluginSet(*pluginDir, log, stdout)
	plugins.Pipeline = p.Name
	plugins.Source = &p.Source
	err = daemon.Run(ctx, daemon.Options{
		Pipeline:          p,
		Launch:            plugins.Launch,
		Logger:            log,
		ShutdownTimeout:   *shutdown,
		MetricsListen:     *metrics,
		AcceptGap:         *acceptGap,
		WarnRetainedWAL:   *warnWAL << 20,
		SlotCheckInterval: *slotCheck,
	})
	if err != nil {
		// Printed once (daemon.Run does not log the error it returns),
		// as plain text like every command's errors: err carries the
		// whole chain of causes, which may span lines.
		fmt.Fprintln(stderr, "walcast run:", err)
		return 1
	}
	return 0
}
