// Command walcast-sink-frozen is a sink built against the frozen SDK in
// sdk/: it writes one JSON line per event with what the host told it
// (replay, gap, its identity), to the file its config names.
package main

import (
	"context"
	"encoding/json"
	"os"
	"sync"

	"github.com/walcast/walcast/pluginkit"
)

type sink struct {
	mu   sync.Mutex
	path string
	id   pluginkit.Identity
}

func (s *sink) Info() pluginkit.Info {
	return pluginkit.Info{Name: "frozen", Version: "v1-frozen", Config: []pluginkit.ConfigField{
		{Name: "path", Type: pluginkit.TypeString, Required: true, Doc: "The file events are appended to."},
	}}
}

func (s *sink) Configure(ctx context.Context, raw json.RawMessage) error {
	var c struct {
		Path string `json:"path"`
	}
	if err := pluginkit.DecodeConfig(raw, &c); err != nil {
		return err
	}
	if c.Path == "" {
		return &pluginkit.ConfigError{Field: "path", Msg: "is required"}
	}
	s.mu.Lock()
	s.path, s.id = c.Path, pluginkit.IdentityFrom(ctx)
	s.mu.Unlock()
	return nil
}

func (s *sink) Open(context.Context) (pluginkit.OpenResult, error) {
	return pluginkit.OpenResult{}, nil
}

func (s *sink) Deliver(ctx context.Context, events []pluginkit.Event) (pluginkit.DeliverResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := os.OpenFile(s.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return pluginkit.DeliverResult{}, err
	}
	enc := json.NewEncoder(f)
	for _, e := range events {
		line := map[string]any{"id": e.ID.String(), "replay": pluginkit.IsReplay(ctx), "gap": pluginkit.GapBefore(ctx),
			"pipeline": s.id.Pipeline, "sink": s.id.SinkID, "payload": json.RawMessage(e.Payload)}
		if err := enc.Encode(line); err != nil {
			f.Close()
			return pluginkit.DeliverResult{}, err
		}
	}
	return pluginkit.DeliverResult{}, f.Close()
}

func (s *sink) Close(context.Context) error { return nil }

func main() { pluginkit.Serve(&sink{}) }
