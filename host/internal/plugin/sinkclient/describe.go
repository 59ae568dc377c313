package sinkclient

import (
	"context"
	"encoding/json"

	"github.com/walcast/walcast/pluginkit"
)

// Describe launches the plugin only to ask for its description and, when
// sinkConfig is not nil, to validate that config with Configure; it never
// calls Open, and kills the process before returning. This is what
// `walcast validate` needs. A rejected attribute comes back as a
// *pluginkit.ConfigError (with the Info still filled in).
func Describe(ctx context.Context, cfg Config, sinkConfig json.RawMessage) (pluginkit.Info, error) {
	p, err := Launch(ctx, cfg)
	if err != nil {
		return pluginkit.Info{}, err
	}
	defer p.Kill()
	info, err := p.Info(ctx)
	if err != nil {
		return pluginkit.Info{}, err
	}
	if sinkConfig != nil {
		if err := p.Configure(ctx, sinkConfig); err != nil {
			return info, err
		}
	}
	return info, nil
}
