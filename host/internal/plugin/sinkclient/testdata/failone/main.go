// Command failone is a sink plugin for tests that speaks protocol
// version 2 only (pluginkit.ServeBatch): it writes one JSON line per
// Deliver call to the file its config names, with the ids it was given and
// the flags of the batch, and names the events whose key is fail_key as
// failed (retryable, or permanent with permanent = true) while it takes
// the others.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"sync"

	"github.com/walcast/walcast/pluginkit"
)

type sink struct {
	mu  sync.Mutex
	cfg struct {
		Path      string `json:"path"`
		FailKey   string `json:"fail_key"`
		Permanent bool   `json:"permanent"`
	}
	setup pluginkit.Setup
}

var _ pluginkit.BatchSink = (*sink)(nil)

func (s *sink) Info() pluginkit.Info {
	return pluginkit.Info{Name: "failone", Version: "test", Config: []pluginkit.ConfigField{
		{Name: "path", Type: pluginkit.TypeString, Required: true, Doc: "Where each call is written."},
		{Name: "fail_key", Type: pluginkit.TypeString, Doc: "The key of the events to fail."},
		{Name: "permanent", Type: pluginkit.TypeBool, Doc: "Fail them permanently."},
	}}
}

func (s *sink) Configure(_ context.Context, setup pluginkit.Setup) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setup = setup
	return pluginkit.DecodeConfig(setup.Config, &s.cfg)
}

func (s *sink) Open(context.Context) (pluginkit.OpenResult, error) {
	return pluginkit.OpenResult{}, nil
}

// call is the line written for one Deliver.
type call struct {
	IDs      []string `json:"ids"`
	Failed   []string `json:"failed"`
	Replay   bool     `json:"replay"`
	Gap      bool     `json:"gap"`
	Pipeline string   `json:"pipeline"`
	Sink     string   `json:"sink"`
}

func (s *sink) Deliver(_ context.Context, b pluginkit.Batch) (pluginkit.DeliverResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := call{Replay: b.Replay, Gap: b.GapBefore, Pipeline: s.setup.Sink.Pipeline, Sink: s.setup.Sink.SinkID}
	failed := map[int]error{}
	for i, e := range b.Events {
		c.IDs = append(c.IDs, e.ID.String())
		if s.cfg.FailKey != "" && string(e.Key) == s.cfg.FailKey {
			c.Failed = append(c.Failed, e.ID.String())
			err := errors.New("the destination refuses key " + s.cfg.FailKey)
			if s.cfg.Permanent {
				err = pluginkit.Permanent(err)
			}
			failed[i] = err
		}
	}
	f, err := os.OpenFile(s.cfg.Path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return pluginkit.DeliverResult{}, err
	}
	if err := json.NewEncoder(f).Encode(c); err != nil {
		f.Close()
		return pluginkit.DeliverResult{}, err
	}
	if err := f.Close(); err != nil {
		return pluginkit.DeliverResult{}, err
	}
	if len(failed) > 0 {
		return pluginkit.DeliverResult{}, &pluginkit.BatchError{Failed: failed}
	}
	return pluginkit.DeliverResult{}, nil
}

func (s *sink) Close(context.Context) error { return nil }

func main() { pluginkit.ServeBatch(&sink{}) }
