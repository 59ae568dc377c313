// Package pluginkit is the SDK walcast sinks are built on. A sink is an
// executable named walcast-sink-<type> whose main is one line:
//
//	func main() { pluginkit.ServeBatch(mysink.New()) }
//
// The host launches it as a separate process, speaks gRPC to it and hands
// it batches of change events; everything about processes, handshakes and
// the wire is pluginkit's business, not the sink's.
//
// # The contract
//
// A sink implements BatchSink (or Sink, the first version of the same
// contract, below). The host calls Info (at any time, also from `walcast
// validate`), then Configure with a Setup (the sink's `config` block as
// JSON, the sink's Identity and the tables it can receive), Open, Deliver
// any number of times, and Close. Deliver receives a Batch; a nil error
// means every event of the batch is durably at the destination: only then
// does the host record the acknowledgement, and only then may the
// replication slot let the change go. Anything else makes the host deliver
// again, so delivery is at-least-once and Event.ID is what receivers
// deduplicate on: it is identical on every redelivery.
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
//     stop the pipeline;
//   - a *BatchError: some events failed, each with one of the kinds above,
//     and every other event of the batch is written. The host retries,
//     pauses for or parks exactly those, and resolves the rest at once.
//
// Configure reports a bad setting with a *ConfigError naming the attribute,
// and the host points at that attribute's line in the pipeline file;
// DecodeConfig turns the config JSON into a struct and does this for
// unknown attributes and wrong types.
//
// # Logging
//
// Log with NewLogger: the host re-emits the lines through its own log,
// tagged with the sink's id. Never print to stdout before Serve runs: it
// carries the handshake.
//
// # Sink, the first version
//
// Sink is the interface sinks implemented before BatchSink, served with
// Serve. It is the same contract with the Setup and Batch facts read from
// the context: IdentityFrom and TablesFrom in Configure, IsReplay and
// GapBefore in Deliver. It cannot name the events of a batch that failed.
// Sinks written against it keep building and running unchanged; new sinks
// implement BatchSink.
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
//     are not added to the Sink or BatchSink interfaces. A minor version
//     may add functions, types, fields of Info, Setup, Batch and the
//     result structs, error kinds' helpers, and sinktest checks; a new
//     sinktest check may fail a sink that breaks a rule this documentation
//     already states. A contract that must change gets a new interface
//     beside the old one, as BatchSink came beside Sink.
//   - A patch version fixes bugs and raises dependency versions only.
//   - A plugin keeps running under newer hosts. The host and a plugin
//     negotiate the protocol version (go-plugin's handshake): the host
//     speaks every version since the first, and a plugin built with any
//     pluginkit runs under every host that speaks its version. Serve
//     speaks versions 1 and 2, so a Sink also runs under hosts older than
//     version 2; ServeBatch speaks version 2, which a BatchSink's answers
//     need, and a host older than that refuses it at start, naming both
//     versions.
//
// The go directive and the dependency versions in pluginkit's go.mod are
// floors, the oldest that build and pass its tests; they rise only in a
// minor version. proto/sink/wire is the host's and the SDK's shared
// plumbing, not SDK API: sinks never import it.
//
// (Before the first release, v0, the host-only functions WithIdentity,
// WithTables, WithReplay, WithGapBefore and the constant MaxMessageSize
// left this package: the host sets these facts, sinks only read them.)
package pluginkit
