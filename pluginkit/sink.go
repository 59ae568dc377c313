package pluginkit

import (
	"context"
	"encoding/json"
)

// Sink is the first version of what a sink plugin implements, served with
// Serve; new sinks implement BatchSink. The host calls Configure once, then
// Open, then Deliver any number of times, then Close. Deliver may be called
// concurrently with batches of different rows (the pipeline's max_in_flight)
// unless Info.Ordered asks for one batch at a time. After a plugin
// process is restarted the sequence starts again with Configure.
//
// Every context passed to a Sink carries the host's deadline for that call
// across the process boundary; a sink must return promptly when it ends.
type Sink interface {
	// Info describes the sink. It must not block and must work before
	// Configure, so that `walcast validate` can check a config block
	// without opening anything.
	Info() Info

	// Configure receives the sink's HCL `config` block as JSON, already
	// checked against Info().Config. It validates and stores the settings
	// but opens no connection. IdentityFrom(ctx) names the sink and
	// TablesFrom(ctx) lists its tables. Return a *ConfigError to point the
	// user at the offending attribute.
	Configure(ctx context.Context, config json.RawMessage) error

	// Open connects to the destination. The returned OpenResult may name
	// the last event id the destination itself has durably recorded (the
	// Kafka sink's checkpoint topic, for example); the host then never
	// redelivers live events at or below it. Parked events an operator
	// replays lie below it all the same: they come in batches of their
	// own, marked as a replay (Batch.Replay, IsReplay), and must be
	// written.
	Open(ctx context.Context) (OpenResult, error)

	// Deliver hands over a batch of events in id order. A nil error means
	// every event is durably at the destination: only then does the host
	// record the acknowledgement. Errors are retryable unless wrapped with
	// Permanent; Throttled asks the host to pause. IsReplay(ctx) and
	// GapBefore(ctx) say what Batch.Replay and Batch.GapBefore say. The
	// context ends at the sink's deliver_timeout. The events and their Key and Payload bytes
	// are the sink's: they are never reused, so keeping them after Deliver
	// returns is safe (a kept event holds its whole batch's buffer).
	Deliver(ctx context.Context, events []Event) (DeliverResult, error)

	// Close releases everything Open acquired.
	Close(ctx context.Context) error
}

// Info is a sink's description of itself.
type Info struct {
	// Name is the plugin type used in `sink "<name>" "<id>"`.
	Name string
	// Version is the sink's own version string.
	Version string
	// Config declares the attributes accepted in the `config` block.
	Config []ConfigField
	// Ordered asks the host to keep one batch in flight, in global commit
	// order, whatever the pipeline's delivery block says.
	Ordered bool
	// BatchSize, when set, is the batch size the host uses for this sink
	// when the pipeline's delivery block sets no batch_size (the host's
	// default is 100): for a destination whose every call has a high
	// fixed cost, such as a Kafka transaction. Hosts older than this field
	// ignore it. At most 10000.
	BatchSize int
	// Routes declares that the sink delivers each event to the destination
	// its Event.Route names: a topic, a URL path, a channel, a subject, a
	// stream key. Set it only when Deliver honours Event.Route (an event
	// with an empty Route goes where it would without routes). The host
	// refuses a sink block with a route expression whose plugin does not
	// set Routes, at the route's place in the pipeline file, instead of
	// letting every event quietly go to one destination. Route only ever
	// chooses a destination: events of one row still arrive in commit
	// order, and a Route the destination cannot take (a name it refuses)
	// is a Permanent error that names the route, so the event parks.
	Routes bool
}

// OpenResult is what a sink reports after connecting.
type OpenResult struct {
	// Checkpoint, when non-zero, is the last event id the destination has
	// durably recorded on its own.
	Checkpoint EventID
	// Epoch is the Batch.Epoch Checkpoint was recorded in (empty when
	// unknown). The host skips by Checkpoint only when Epoch is empty or
	// the epoch it streams in: a checkpoint of an earlier epoch (before a
	// failover, say) says nothing about the ids it delivers now.
	Epoch string
}

// DeliverResult is what a successful Deliver reports.
type DeliverResult struct {
	// Duplicates counts events of the batch the sink recognised as already
	// delivered and skipped. In a replay batch (Batch.Replay) the host
	// treats any duplicate as a failure and keeps the events parked.
	Duplicates int
}
