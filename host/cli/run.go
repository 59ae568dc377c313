package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
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
	slotCheck := fs.Duration("slot-check-interval", 10*time.Second, "how often the slot's retained WAL and the publication's tables are checked")
	maxPipelines := fs.Int("max-pipelines", 0, "lead at most this many pipelines at once and stand by for the rest (0: no cap; instances started with the same set still share the pipelines evenly)")
	paths, code, ok := parseAll(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(paths) == 0 {
		fmt.Fprint(stderr, "walcast run: want at least one PIPELINE.hcl or directory argument, got 0\n\n")
		printHelp(stderr, fs)
		return 2
	}
	if *maxPipelines < 0 {
		fmt.Fprintln(stderr, "walcast run: --max-pipelines must be 0 (no cap) or more")
		return 2
	}
	log, err := newLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		fmt.Fprintln(stderr, "walcast run:", err)
		return 2
	}
	pipelines, err := loadPipelines(paths, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "walcast run:", err)
		return 1
	}
	if pipelines == nil {
		return 1 // the diagnostics are printed
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Each pipeline gets its own plugin set: plugins are launched for one
	// pipeline's source.
	byName := map[string]*daemon.PluginSet{}
	for _, p := range pipelines {
		ps := newPluginSet(*pluginDir, log, stdout)
		ps.Pipeline = p.Name
		ps.Source = &p.Source
		byName[p.Name] = ps
	}
	err = daemon.RunInstance(ctx, daemon.InstanceOptions{
		Pipelines:    pipelines,
		MaxPipelines: *maxPipelines,
		LaunchFor:    func(pipeline string) daemon.Launcher { return byName[pipeline].Launch },
		Options: daemon.Options{
			Logger:            log,
			ShutdownTimeout:   *shutdown,
			MetricsListen:     *metrics,
			AcceptGap:         *acceptGap,
			WarnRetainedWAL:   *warnWAL << 20,
			SlotCheckInterval: *slotCheck,
		},
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

// loadPipelines loads the pipeline files named, a directory standing for
// every *.hcl in it. Pipeline names must differ: each names a leadership
// lock, a slot and checkpoints. nil, nil: diagnostics were printed.
func loadPipelines(paths []string, stderr io.Writer) ([]*config.Pipeline, error) {
	files, err := pipelineFiles(paths)
	if err != nil {
		return nil, err
	}
	var out []*config.Pipeline
	bad := false
	for _, f := range files {
		p, ok := loadPipeline(f, stderr)
		if !ok {
			bad = true
			continue
		}
		out = append(out, p)
	}
	if err := distinctNames(out); err != nil {
		return nil, err
	}
	if bad {
		return nil, nil
	}
	return out, nil
}

// pipelineFiles expands paths into pipeline files: a file as it is, a
// directory into every *.hcl in it (one without any is an error).
func pipelineFiles(paths []string) ([]string, error) {
	var files []string
	for _, path := range paths {
		st, err := os.Stat(path)
		if err != nil || !st.IsDir() {
			// Loading it says why it cannot be read.
			files = append(files, path)
			continue
		}
		in, err := filepath.Glob(filepath.Join(path, "*.hcl"))
		if err != nil {
			return nil, err
		}
		if len(in) == 0 {
			return nil, fmt.Errorf("no *.hcl pipeline file in directory %s", path)
		}
		files = append(files, in...)
	}
	return files, nil
}

// distinctNames refuses two files defining the same pipeline.
func distinctNames(ps []*config.Pipeline) error {
	seen := map[string]string{}
	for _, p := range ps {
		file := p.NameRange.Filename
		if other, ok := seen[p.Name]; ok {
			return fmt.Errorf("%s and %s both define pipeline %q: each pipeline needs its own name", other, file, p.Name)
		}
		seen[p.Name] = file
	}
	return nil
}
