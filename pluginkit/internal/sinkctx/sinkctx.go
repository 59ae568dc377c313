// Package sinkctx carries, in a call's context, what the host tells a
// pluginkit.Sink (the version 1 interface) about the call: the sink's
// identity and tables for Configure, the replay and gap flags for
// Deliver. A pluginkit.BatchSink receives the same facts as values
// (pluginkit.Setup, pluginkit.Batch), so this package exists only to keep
// Sink working. pluginkit's server and sinktest set the values, Sink's
// readers (pluginkit.IdentityFrom, TablesFrom, IsReplay, GapBefore) read
// them; nothing outside the pluginkit module can set them.
package sinkctx

import "context"

// Identity names a sink in the host's pipeline (pluginkit.Identity).
type Identity struct {
	Pipeline, SinkID string
}

type (
	identityKey struct{}
	tablesKey   struct{}
	replayKey   struct{}
	gapKey      struct{}
	epochKey    struct{}
)

// ForConfigure returns ctx carrying what Configure is told: the sink's
// identity and, when not empty, the tables it can receive events of.
func ForConfigure(ctx context.Context, id Identity, tables []string) context.Context {
	ctx = context.WithValue(ctx, identityKey{}, id)
	if len(tables) > 0 {
		ctx = context.WithValue(ctx, tablesKey{}, tables)
	}
	return ctx
}

// ForDeliver returns ctx carrying what a batch says besides its events: a
// replay of parked events, events dropped just before it, and the epoch
// of its ids (when not empty).
func ForDeliver(ctx context.Context, replay, gapBefore bool, epoch string) context.Context {
	if epoch != "" {
		ctx = context.WithValue(ctx, epochKey{}, epoch)
	}
	if replay {
		ctx = context.WithValue(ctx, replayKey{}, true)
	}
	if gapBefore {
		ctx = context.WithValue(ctx, gapKey{}, true)
	}
	return ctx
}

// IdentityOf returns the identity ForConfigure put in ctx, zero if none.
func IdentityOf(ctx context.Context) Identity {
	id, _ := ctx.Value(identityKey{}).(Identity)
	return id
}

// TablesOf returns the tables ForConfigure put in ctx, nil if none.
func TablesOf(ctx context.Context) []string {
	t, _ := ctx.Value(tablesKey{}).([]string)
	return t
}

// Replay reports whether ForDeliver marked ctx as a replay.
func Replay(ctx context.Context) bool {
	v, _ := ctx.Value(replayKey{}).(bool)
	return v
}

// Epoch returns the epoch ForDeliver put in ctx, empty if none.
func Epoch(ctx context.Context) string {
	v, _ := ctx.Value(epochKey{}).(string)
	return v
}

// GapBefore reports whether ForDeliver marked ctx as following a gap.
func GapBefore(ctx context.Context) bool {
	v, _ := ctx.Value(gapKey{}).(bool)
	return v
}
