package sinktest

import (
	"context"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/pluginkit/internal/sinkctx"
)

// legacy drives a pluginkit.Sink as pluginkit.Serve does: what Setup and
// Batch say reaches it in the call's context.
type legacy struct{ sink pluginkit.Sink }

var _ pluginkit.BatchSink = legacy{}

func (l legacy) Info() pluginkit.Info { return l.sink.Info() }

func (l legacy) Configure(ctx context.Context, setup pluginkit.Setup) error {
	id := sinkctx.Identity{Pipeline: setup.Sink.Pipeline, SinkID: setup.Sink.SinkID}
	return l.sink.Configure(sinkctx.ForConfigure(ctx, id, setup.Tables), setup.Config)
}

func (l legacy) Open(ctx context.Context) (pluginkit.OpenResult, error) { return l.sink.Open(ctx) }

func (l legacy) Deliver(ctx context.Context, b pluginkit.Batch) (pluginkit.DeliverResult, error) {
	return l.sink.Deliver(sinkctx.ForDeliver(ctx, b.Replay, b.GapBefore, b.Epoch), b.Events)
}

func (l legacy) Close(ctx context.Context) error { return l.sink.Close(ctx) }
