package pluginkit

import "context"

// Identity names a sink inside the host's pipeline. It is stable across
// restarts of the host and of the plugin, so a sink can derive identities
// from it that must not change (the Kafka sink's transactional id, which
// fences zombie producers, is "walcast-<sink id>" by default).
type Identity struct {
	Pipeline string
	SinkID   string
}

type identityKey struct{}

// WithIdentity returns ctx carrying id, as Serve passes it to Configure.
// Tests (pluginkit/sinktest) and programs that run a sink in-process use
// it to give the sink the identity the host would.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityFrom returns the identity the host passed with Configure. It is
// only set on the context of Configure; it is zero when the host did not
// name the sink (an older host, or a test calling Configure directly).
func IdentityFrom(ctx context.Context) Identity {
	id, _ := ctx.Value(identityKey{}).(Identity)
	return id
}

type tablesKey struct{}

// WithTables returns ctx carrying the tables a sink can receive events of,
// as Serve passes them to Configure. Tests use it to give the sink the
// tables the host would.
func WithTables(ctx context.Context, tables []string) context.Context {
	return context.WithValue(ctx, tablesKey{}, tables)
}

// TablesFrom returns, inside Configure, the "schema.table" names the sink
// can receive events of (the sink's tables filter, else the source's
// tables), so that Configure can reject a table the sink could not route
// before anything runs. It is nil when the host did not say (an older host,
// or a test calling Configure directly).
func TablesFrom(ctx context.Context) []string {
	t, _ := ctx.Value(tablesKey{}).([]string)
	return t
}

type gapKey struct{}

// WithGapBefore marks ctx for a Deliver whose batch follows events that
// were dropped for this sink (see GapBefore). The host sets it; tests use it.
func WithGapBefore(ctx context.Context) context.Context {
	return context.WithValue(ctx, gapKey{}, true)
}

// GapBefore reports, inside Deliver, that events were dropped for this sink
// just before this batch: the sink is not durable and its queue in the host
// was full. A durable sink never sees it. A sink that promises its own
// clients continuity (sse) tells them.
func GapBefore(ctx context.Context) bool {
	v, _ := ctx.Value(gapKey{}).(bool)
	return v
}

type replayKey struct{}

// WithReplay marks ctx for a Deliver of parked events an operator asked
// for again (see IsReplay). The host sets it; tests use it.
func WithReplay(ctx context.Context) context.Context {
	return context.WithValue(ctx, replayKey{}, true)
}

// IsReplay reports, inside Deliver, that the batch holds parked events an
// operator replayed (`walcast replay`). They are older than the events the
// sink delivered since, so they lie at or below any checkpoint the sink
// reported: a sink that skips such events as duplicates must write these
// anyway, without moving its checkpoint back. On a replay batch the host
// treats a reported duplicate as a failure and keeps the events parked.
func IsReplay(ctx context.Context) bool {
	v, _ := ctx.Value(replayKey{}).(bool)
	return v
}
