package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"

	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/hcl/v2"

	"github.com/walcast/walcast/host/internal/config"
	"github.com/walcast/walcast/host/internal/plugin/pluginlock"
	"github.com/walcast/walcast/host/internal/plugin/sinkclient"
	"github.com/walcast/walcast/pluginkit"
)

// PluginSet finds sink plugins on disk and runs them as supervised
// processes. It is both the daemon's Launcher and `walcast validate`'s
// config.PluginChecker.
type PluginSet struct {
	// Dirs are searched in order for walcast-sink-<type>.
	Dirs []string
	// Pipeline names the pipeline to the plugins (pluginkit.IdentityFrom).
	Pipeline string
	// Source is the pipeline's source: Launch tells each plugin the tables
	// its sink can receive (pluginkit.TablesFrom) and points a rejected
	// table at where it is written. Nil tells plugins nothing.
	Source *config.Source
	Logger *slog.Logger
	// Stdout receives what plugins print (the stdout sink's output).
	Stdout io.Writer
}

var _ config.PluginChecker = (*PluginSet)(nil)

// clientConfig finds the plugin for sinkType and, when the lock file of
// the directory it was found in has an entry for that type (it was put
// there by `walcast plugin install`), pins its SHA-256 so that go-plugin
// refuses a binary replaced since. Plugins without an entry, such as the
// built-in sinks of `make build`, run unverified. An unreadable lock file
// is an error rather than "no entry", so damage never turns the check off.
func (ps *PluginSet) clientConfig(sinkType, sinkID string) (sinkclient.Config, error) {
	path, err := sinkclient.Find(sinkType, ps.Dirs)
	if err != nil {
		return sinkclient.Config{}, err
	}
	entry, locked, err := pluginlock.Lookup(filepath.Dir(path), sinkType)
	if err != nil {
		return sinkclient.Config{}, fmt.Errorf("verify sink plugin %q: %w", sinkType, err)
	}
	cfg := sinkclient.Config{Path: path, SinkID: sinkID, Pipeline: ps.Pipeline, Logger: ps.Logger, Stdout: ps.Stdout}
	if locked {
		cfg.SHA256 = entry.SHA256
	}
	return cfg, nil
}

// explainChecksum turns go-plugin's terse "checksums did not match" into
// what happened and what to do about it.
func explainChecksum(cfg sinkclient.Config, err error) error {
	if err == nil || !errors.Is(err, plugin.ErrChecksumsDoNotMatch) {
		return err
	}
	return fmt.Errorf("refusing to run %s: its SHA-256 does not match the checksum recorded in the lock file %s "+
		"(the file was replaced or modified after `walcast plugin install`); "+
		"if the new file is trusted, re-run `walcast plugin install` with its source: %w",
		cfg.Path, pluginlock.Path(filepath.Dir(cfg.Path)), err)
}

// Launch implements Launcher: it asks the plugin for its config schema,
// decodes the sink's config block against it, then starts, configures and
// opens a supervised plugin process (restarted with backoff if it dies).
func (ps *PluginSet) Launch(ctx context.Context, s *config.Sink) (Plugin, pluginkit.OpenResult, error) {
	cfg, err := ps.clientConfig(s.Type, s.ID)
	if err != nil {
		return nil, pluginkit.OpenResult{}, err
	}
	src := ps.Source
	if src == nil {
		src = &config.Source{}
	}
	cfg.Tables = config.SinkTables(src, s)
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		cfg.Env = append(cfg.Env, k+"="+s.Env[k])
	}
	info, err := sinkclient.Describe(ctx, cfg, nil)
	if err != nil {
		return nil, pluginkit.OpenResult{}, fmt.Errorf("describe plugin %s: %w", cfg.Path, explainChecksum(cfg, err))
	}
	if d := config.RouteRefused(s, info); d != nil {
		return nil, pluginkit.OpenResult{}, errors.New(config.FormatDiagnostics(hcl.Diagnostics{d}))
	}
	raw, diags := config.DecodeSinkConfig(s.Config, info.Config)
	if diags.HasErrors() {
		return nil, pluginkit.OpenResult{}, errors.New(config.FormatDiagnostics(diags))
	}
	sup, err := sinkclient.Start(ctx, cfg, raw)
	if err != nil {
		if diags := config.ConfigErrorDiags(src, s, err); len(diags) > 0 {
			return nil, pluginkit.OpenResult{}, errors.New(config.FormatDiagnostics(diags))
		}
		return nil, pluginkit.OpenResult{}, fmt.Errorf("start plugin %s: %w", cfg.Path, explainChecksum(cfg, err))
	}
	return sup, sup.OpenResult(), nil
}

// Describe implements config.PluginChecker.
func (ps *PluginSet) Describe(ctx context.Context, sinkType string) (pluginkit.Info, error) {
	cfg, err := ps.clientConfig(sinkType, sinkType)
	if err != nil {
		return pluginkit.Info{}, err
	}
	info, err := sinkclient.Describe(ctx, cfg, nil)
	return info, explainChecksum(cfg, err)
}

// CheckConfig implements config.PluginChecker.
func (ps *PluginSet) CheckConfig(ctx context.Context, sinkType string, tables []string, raw json.RawMessage) error {
	cfg, err := ps.clientConfig(sinkType, sinkType)
	if err != nil {
		return err
	}
	cfg.Tables = tables
	if raw == nil {
		raw = json.RawMessage("{}")
	}
	_, err = sinkclient.Describe(ctx, cfg, raw)
	return explainChecksum(cfg, err)
}
