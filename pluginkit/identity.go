package pluginkit

import (
	"context"

	"github.com/walcast/walcast/pluginkit/internal/sinkctx"
)

// Identity names a sink inside the host's pipeline. It is stable across
// restarts of the host and of the plugin, so a sink can derive identities
// from it that must not change (the Kafka sink's transactional id, which
// fences zombie producers, is "walcast-<sink id>" by default). A
// BatchSink finds it in Setup.Sink; a Sink with IdentityFrom.
type Identity struct {
	Pipeline string
	SinkID   string
}

// The functions below are how a Sink reads what a BatchSink receives as
// values (Setup, Batch). They read the call's context, where only Serve
// (and sinktest) can put them.

// IdentityFrom returns, inside a Sink's Configure, the identity the host
// named the sink with (Setup.Sink for a BatchSink). It is zero when the
// host did not name the sink (a test calling Configure directly).
func IdentityFrom(ctx context.Context) Identity {
	id := sinkctx.IdentityOf(ctx)
	return Identity{Pipeline: id.Pipeline, SinkID: id.SinkID}
}

// TablesFrom returns, inside a Sink's Configure, the "schema.table" names
// the sink can receive events of (Setup.Tables for a BatchSink), so that
// Configure can reject a table the sink could not route before anything
// runs. It is nil when the host did not say (an older host, or a test
// calling Configure directly).
func TablesFrom(ctx context.Context) []string { return sinkctx.TablesOf(ctx) }

// GapBefore reports, inside a Sink's Deliver, that events were dropped for
// this sink just before this batch (Batch.GapBefore for a BatchSink).
func GapBefore(ctx context.Context) bool { return sinkctx.GapBefore(ctx) }

// EpochOf returns, inside a Sink's Deliver, the epoch of the batch's ids
// (Batch.Epoch for a BatchSink, which says what a sink keeping a
// checkpoint of its own must do with it); empty from an older host.
func EpochOf(ctx context.Context) string { return sinkctx.Epoch(ctx) }

// IsReplay reports, inside a Sink's Deliver, that the batch holds parked
// events an operator replayed (Batch.Replay for a BatchSink, which says
// what a sink must do with them).
func IsReplay(ctx context.Context) bool { return sinkctx.Replay(ctx) }
