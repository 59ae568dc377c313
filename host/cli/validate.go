package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/walcast/walcast/host/internal/config"
	"github.com/walcast/walcast/host/internal/daemon"
)

// cmdValidate checks pipeline files (a directory: every *.hcl in it, as
// walcast run takes them) and their sinks' config blocks, offline. With
// --source it also connects to each pipeline's source, creates nothing,
// and prints the plan: what walcast run would do there and every reason
// it would refuse (plan.go). It exits 0 only when every file is valid
// and, with --source, walcast run would start every pipeline.
func cmdValidate(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("validate", stderr)
	pluginDir := fs.String("plugin-dir", "", "directory holding walcast-sink-* plugins")
	source := fs.Bool("source", false, "also connect to each pipeline's source database (creating nothing) and print what walcast run\nwould do there and every reason it would refuse; exit 0 only when walcast run would start")
	paths, code, ok := parseAll(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(paths) == 0 {
		fmt.Fprint(stderr, "walcast validate: want at least one PIPELINE.hcl or directory argument, got 0\n\n")
		printHelp(stderr, fs)
		return 2
	}
	files, err := pipelineFiles(paths)
	if err != nil {
		fmt.Fprintln(stderr, "walcast validate:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	plugins := newPluginSet(*pluginDir, log, io.Discard)
	var checked []checkedPipeline
	valid := true
	for _, f := range files {
		c := validateFile(ctx, f, plugins, stdout, stderr)
		valid = valid && c.valid
		if c.p != nil {
			checked = append(checked, c)
		}
	}
	var loaded []*config.Pipeline
	for _, c := range checked {
		loaded = append(loaded, c.p)
	}
	if err := distinctNames(loaded); err != nil {
		fmt.Fprintln(stderr, "walcast validate:", err)
		valid = false
	}
	if *source {
		for _, c := range checked {
			valid = writePlan(ctx, stdout, stderr, c, plugins) && valid
		}
	}
	if !valid {
		return 1
	}
	return 0
}

// checkedPipeline is one pipeline file as validate checked it offline.
type checkedPipeline struct {
	file  string
	p     *config.Pipeline // whatever decoded; nil when the file is not HCL
	valid bool
	// sinks are each sink's diagnostics, in p.Sinks' order: its plugin
	// found (and its checksum), its config block accepted.
	sinks []hcl.Diagnostics
}

// validateFile loads one pipeline file and checks each sink against its
// plugin, printing every problem to stderr and, when the file is valid,
// one line to stdout.
func validateFile(ctx context.Context, file string, plugins *daemon.PluginSet, stdout, stderr io.Writer) checkedPipeline {
	p, diags := config.Load(file)
	c := checkedPipeline{file: file, p: p}
	// p holds whatever decoded even when diags has errors, so the sinks'
	// plugins are checked too and one run reports every problem.
	if p != nil {
		for i := range p.Sinks {
			one := &config.Pipeline{Name: p.Name, Source: p.Source, Sinks: p.Sinks[i : i+1]}
			sd := config.Check(ctx, one, plugins)
			c.sinks = append(c.sinks, sd)
			diags = append(diags, sd...)
		}
	}
	if len(diags) > 0 {
		fmt.Fprint(stderr, config.FormatDiagnostics(diags))
	}
	if diags.HasErrors() {
		return c
	}
	c.valid = true
	sinks := "sinks"
	if len(p.Sinks) == 1 {
		sinks = "sink"
	}
	fmt.Fprintf(stdout, "%s: pipeline %q is valid (%d %s)\n", file, p.Name, len(p.Sinks), sinks)
	return c
}
