package config

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/hashicorp/hcl/v2"

	"github.com/walcast/walcast/pluginkit"
)

// PluginChecker is what Check needs from the plugin manager: a sink's
// self-description and its verdict on a config, both obtained without
// opening the sink. The context bounds one call, including starting the
// plugin process.
type PluginChecker interface {
	// Describe returns the Info of the plugin for sinkType; an error means
	// the plugin cannot be found or started.
	Describe(ctx context.Context, sinkType string) (pluginkit.Info, error)
	// CheckConfig asks the plugin to validate config (as produced by
	// DecodeSinkConfig) the way Configure would, telling it the tables the
	// sink can receive (see SinkTables). Each *pluginkit.ConfigError in
	// the result points at one attribute or table.
	CheckConfig(ctx context.Context, sinkType string, tables []string, config json.RawMessage) error
}

// Check validates each sink of p against its plugin, for `walcast
// validate` and before `walcast run` opens anything: the plugin must exist,
// the config block must match the plugin's declared attributes and satisfy
// the plugin itself. It also warns about delivery settings the plugin will
// override. Sinks are checked one after another; Check stops early when
// ctx ends.
func Check(ctx context.Context, p *Pipeline, plugins PluginChecker) hcl.Diagnostics {
	var diags hcl.Diagnostics
	for i := range p.Sinks {
		if ctx.Err() != nil {
			break
		}
		diags = append(diags, checkSink(ctx, &p.Source, &p.Sinks[i], plugins)...)
	}
	return diags
}

func checkSink(ctx context.Context, src *Source, s *Sink, plugins PluginChecker) hcl.Diagnostics {
	info, err := plugins.Describe(ctx, s.Type)
	if err != nil {
		return hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Unavailable sink plugin",
			Detail:   fmt.Sprintf("Sink %q: cannot load plugin %q: %v.", s.ID, s.Type, err),
			Subject:  s.TypeRange.Ptr(),
		}}
	}

	var diags hcl.Diagnostics
	if d := orderedWarning(s, info); d != nil {
		diags = append(diags, d)
	}
	if d := RouteRefused(s, info); d != nil {
		diags = append(diags, d)
	}

	raw, cfgDiags := DecodeSinkConfig(s.Config, info.Config)
	diags = append(diags, cfgDiags...)
	if cfgDiags.HasErrors() {
		return diags // the plugin would only repeat what is already said
	}

	if err := plugins.CheckConfig(ctx, s.Type, SinkTables(src, s), raw); err != nil {
		if cdiags := ConfigErrorDiags(src, s, err); len(cdiags) > 0 {
			diags = append(diags, cdiags...)
		} else {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  fmt.Sprintf("Invalid config for sink %q", s.ID),
				Detail:   err.Error(),
				Subject:  s.ConfigRange.Ptr(),
			})
		}
	}
	return diags
}

// RouteRefused is the error for a sink with a route expression whose
// plugin does not declare that it delivers by route (Info.Routes; a
// plugin that predates the field declares nothing): without it every
// event would quietly go to the sink's one destination. It points at the
// route attribute. nil when the sink has no route or the plugin routes.
// `walcast validate` reports it through Check, `walcast run` before it
// starts the plugin.
func RouteRefused(s *Sink, info pluginkit.Info) *hcl.Diagnostic {
	if s.Rules.Route == "" || info.Routes {
		return nil
	}
	return &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  "Route not supported",
		Detail: fmt.Sprintf(`Sink %q: the %s plugin delivers every event to one destination and does not declare routes (pluginkit.Info.Routes), so the route would be ignored; remove route, or use a sink whose destination has a name per event (kafka, webhook, sse, nats, redis, rabbitmq).`,
			s.ID, s.Type),
		Subject: s.Rules.Place("route", s.DeclRange).Range.Ptr(),
	}
}

// orderedWarning: a plugin that declares Ordered gets one batch at a time
// in commit order whatever the delivery block says. Defaults are not worth
// a warning; a max_in_flight the user wrote under row ordering is, because
// they expect parallel batches they will not get.
func orderedWarning(s *Sink, info pluginkit.Info) *hcl.Diagnostic {
	dl := s.Delivery
	if !info.Ordered || dl.Ordering != OrderingRow || dl.MaxInFlightRange == nil || dl.MaxInFlight <= 1 {
		return nil
	}
	return &hcl.Diagnostic{
		Severity: hcl.DiagWarning,
		Summary:  "max_in_flight has no effect",
		Detail: fmt.Sprintf(`The %s plugin delivers in order: sink %q gets one batch at a time in commit order, so max_in_flight = %d is ignored; set ordering = "strict" to say so.`,
			s.Type, s.ID, dl.MaxInFlight),
		Subject: dl.MaxInFlightRange,
	}
}
