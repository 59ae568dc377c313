// Command envdump is a sink plugin for tests: its description lists its
// whole environment, one config field per variable (name, and the value
// as the field's doc), so a test can see exactly what a plugin inherits.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"

	"github.com/walcast/walcast/pluginkit"
)

type sink struct{}

func (sink) Info() pluginkit.Info {
	info := pluginkit.Info{Name: "envdump", Version: "test"}
	for _, kv := range os.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		info.Config = append(info.Config, pluginkit.ConfigField{Name: name, Type: pluginkit.TypeString, Doc: value})
	}
	return info
}

func (sink) Configure(context.Context, json.RawMessage) error { return nil }
func (sink) Open(context.Context) (pluginkit.OpenResult, error) {
	return pluginkit.OpenResult{}, nil
}
func (sink) Deliver(context.Context, []pluginkit.Event) (pluginkit.DeliverResult, error) {
	return pluginkit.DeliverResult{}, errors.New("envdump delivers nothing")
}
func (sink) Close(context.Context) error { return nil }

func main() { pluginkit.Serve(sink{}) }
