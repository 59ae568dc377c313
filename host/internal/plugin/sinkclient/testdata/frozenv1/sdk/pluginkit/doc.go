// Package pluginkit is the SDK walcast sinks are built on. A sink is an
// executable named walcast-sink-<type> whose main is one line:
//
//	func main() { pluginkit.Serve(mysink.New()) }
//
// The host launches it as a separate process, speaks gRPC to it and hands
// it batches of change events; everything about processes, handshakes and
// the wire is pluginkit's business (and proto/sink/wire's), not the
// sink's.
//
// # The contract
//
// A sink implements Sink. The host calls Info (at any time, also from
// `walcast validate`), then Configure with the sink's `config` block as
// JSON, Open, Deliver any number of times, and Close. A nil error from
// Deliver means every event of the batch is durably at the destination:
// only then does the host record the acknowledgement, and only then may the
// replication slot let the change go. Anything else makes the host deliver
// the batch again, so delivery is at-least-once and Event.ID is what
// receivers deduplicate on: it is identical on every redelivery.
//
// Events of one row (schema, table and key) reach a sink in commit order and
// never in two concurrent Delivers; different rows may be delivered
// concurrently unless Info.Ordered asks for one batch at a time. Compare
// ids with CompareEventIDs or EventID.Compare, never as strings.
//
// # Errors
//
// What Deliver returns decides what the host does next:
//
//   - a plain error, or Retryable: retry the batch with backoff, and park
//     its events after the pipeline's max_attempts;
//   - Throttled(d, err): pause this sink for d without counting an attempt
//     (an HTTP 429 with Retry-After, say);
//   - Permanent: retrying cannot help (a payload the destination refuses):
//     park the events now and go on with other rows;
//   - Fatal: this sink cannot deliver anything any more (fenced, gone):
//     stop the pipeline.
//
// Configure reports a bad setting with a *ConfigError naming the attribute,
// and the host points at that attribute's line in the pipeline file;
// DecodeConfig turns the config JSON into a struct and does this for
// unknown attributes and wrong types.
//
// # Logging, identity, gaps
//
// Log with NewLogger: the host re-emits the lines through its own log,
// tagged with the sink's id. Never print to stdout before Serve runs: it
// carries the handshake. IdentityFrom(ctx) in Configure names the pipeline
// and sink, stable across restarts. A non-durable sink may be told with
// GapBefore that events were dropped before a batch.
//
// # Testing
//
// Run the conformance suite, pluginkit/sinktest, from the sink's own go
// test; `walcast plugin test ./walcast-sink-NAME` runs the same checks
// against the built binary, and `walcast validate` and `walcast run` with
// --plugin-dir check it in a pipeline. examples/customsink is a complete
// sink; `walcast plugin new NAME` writes a skeleton.
//
// # Versions and compatibility
//
// pluginkit is a Go module of its own, github.com/walcast/walcast/pluginkit,
// released with tags pluginkit/vX.Y.Z; it requires the event model
// github.com/walcast/walcast/pluginkit/cdc and the wire contracts
// github.com/walcast/walcast/proto, released as pluginkit/cdc/vX.Y.Z and
// proto/vX.Y.Z. docs/writing-a-sink.md says how to build against a
// checkout before a release.
//
// Within a major version:
//
//   - A sink that builds against pluginkit vX.Y builds against every
//     later vX: exported names are not removed or changed, and methods
//     are not added to the Sink interface. A minor version may add
//     functions, types, fields of Info and of the result structs, error
//     kinds' helpers and sinktest checks; a new sinktest check may fail a
//     sink that breaks a rule the Sink documentation already states.
//   - A patch version fixes bugs and raises dependency versions only.
//   - The protocol a plugin speaks with the host (the go-plugin handshake,
//     the walcast.sink.v1 service and how errors map to gRPC status) does
//     not change: a plugin built with any pluginkit vX.Y.Z runs under
//     every walcast host that speaks that major version's protocol
//     version, and hosts keep accepting older protocol versions.
//
// Only a new major version, with a new protocol version (proto/sink/v2
// next to v1), changes the Sink interface or what travels on the wire.
// The go directive and the dependency versions in pluginkit's go.mod are
// floors, the oldest that build and pass its tests; they rise only in a
// minor version. proto/sink/wire is the host's and the SDK's shared
// plumbing, not SDK API: sinks never import it.
package pluginkit
