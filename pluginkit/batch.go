package pluginkit

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/walcast/walcast/pluginkit/internal/sinkctx"
)

// BatchSink is what a sink plugin implements to speak protocol version 2
// (serve it with ServeBatch). It is Sink with two calls made explicit:
// Configure receives a Setup, which names the sink and its tables, and
// Deliver receives a Batch, which says whether it is a replay or follows
// a gap, instead of finding either in the context. Its Deliver may return
// a *BatchError naming the events that failed while the others were
// written. Everything Sink documents holds for BatchSink too.
type BatchSink interface {
	// Info describes the sink, as Sink.Info.
	Info() Info

	// Configure validates and stores the settings in setup, as
	// Sink.Configure; it opens no connection.
	Configure(ctx context.Context, setup Setup) error

	// Open connects to the destination, as Sink.Open.
	Open(ctx context.Context) (OpenResult, error)

	// Deliver hands over a batch of events in id order. A nil error means
	// every event is durably at the destination; a *BatchError means
	// every event it does not name is, and says why each named one
	// failed; any other error fails the batch as a whole, as for
	// Sink.Deliver. The context ends at the sink's deliver_timeout; the
	// events' bytes are the sink's to keep.
	Deliver(ctx context.Context, batch Batch) (DeliverResult, error)

	// Close releases everything Open acquired.
	Close(ctx context.Context) error
}

// Setup is what a BatchSink's Configure receives.
type Setup struct {
	// Config is the sink's `config` block as a JSON object, already
	// checked against Info().Config; "{}" when the pipeline has none.
	// DecodeConfig turns it into a struct.
	Config json.RawMessage
	// Sink names the sink, stable across restarts (see Identity). It is
	// zero when the caller did not name it (a test).
	Sink Identity
	// Tables are the "schema.table" names the sink can receive events of
	// (its tables filter, else the source's tables), so that Configure
	// can reject a table it could not route before anything runs. Nil
	// when the caller did not say.
	Tables []string
}

// Batch is what a BatchSink's Deliver receives: events in id order, and
// what the host knows about them as a whole.
type Batch struct {
	// Events are the changes, in id order. They and their Key and Payload
	// bytes are the sink's: they are never reused, so keeping them after
	// Deliver returns is safe (a kept event holds the batch's buffer).
	Events []Event
	// Replay: the events were parked and an operator asked for them
	// again (`walcast replay`). They are older than the events the sink
	// delivered since, so they lie at or below any checkpoint it reported
	// in OpenResult: a sink that skips events at or below its checkpoint
	// as duplicates must write these anyway, without moving its checkpoint
	// back. The host treats a duplicate reported for a replay batch as a
	// failure and keeps the events parked.
	Replay bool
	// GapBefore: events were dropped for this sink just before this
	// batch, because the sink is not durable and its queue in the host was
	// full. A durable sink never sees it; a sink that promises its own
	// clients continuity (sse) tells them.
	GapBefore bool
	// Epoch names the series the events' ids belong to. Ids of one epoch
	// are ordered as the ids of one replication slot are; an id of
	// another epoch says nothing about them: after a primary failover or
	// a restored database the new slot's ids can be lower than ids
	// delivered before. The host starts a new epoch whenever it streams
	// from a new slot incarnation (an accepted gap). A sink that skips
	// events at or below a checkpoint of its own stores Epoch next to it,
	// in the same write, reports it in OpenResult.Epoch, and skips only
	// while a batch's Epoch is the stored one: the first batch of a new
	// epoch is written whole and its last id becomes the checkpoint,
	// lower or not. An empty Epoch (an older host), or none stored (a
	// checkpoint written before epochs), compares equal to any. It is
	// opaque: compare it, never parse it.
	Epoch string
}

// BatchError is a BatchSink's answer when some events of a batch failed
// and every other event of it is durably at the destination, as Redpanda
// Connect's BatchError is: the host then retries, pauses for or parks
// exactly the failed events, and resolves the rest at once.
//
// One rule the host keeps whatever a sink answers: an event that must
// follow a failed one (a later change of the same row; with Info.Ordered,
// every later event of the batch) is delivered again after it, so a sink
// need not write it, and one it wrote is written again.
type BatchError struct {
	// Failed maps the index in Batch.Events of each failed event to its
	// error, classified as Deliver's are: Retryable (or unclassified),
	// Throttled or Permanent. A Fatal error fails the whole batch; a
	// BatchError naming no event is a retryable failure of the batch.
	Failed map[int]error
}

func (e *BatchError) Error() string {
	idx := e.indexes()
	if len(idx) == 0 {
		return "batch failed (no event named)"
	}
	const show = 3
	parts := make([]string, 0, show)
	for _, i := range idx[:min(show, len(idx))] {
		parts = append(parts, fmt.Sprintf("event %d: %v", i, e.Failed[i]))
	}
	more := ""
	if len(idx) > show {
		more = fmt.Sprintf("; and %d more", len(idx)-show)
	}
	return fmt.Sprintf("%d of the batch's events failed: %s%s", len(idx), strings.Join(parts, "; "), more)
}

// indexes returns the failed events' indexes in order.
func (e *BatchError) indexes() []int {
	idx := make([]int, 0, len(e.Failed))
	for i := range e.Failed {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	return idx
}

// legacySink serves a Sink as a BatchSink: what Setup and Batch say
// reaches it in the call's context, where IdentityFrom, TablesFrom,
// IsReplay and GapBefore find it.
type legacySink struct{ sink Sink }

var _ BatchSink = legacySink{}

func (l legacySink) Info() Info { return l.sink.Info() }

func (l legacySink) Configure(ctx context.Context, setup Setup) error {
	id := sinkctx.Identity{Pipeline: setup.Sink.Pipeline, SinkID: setup.Sink.SinkID}
	return l.sink.Configure(sinkctx.ForConfigure(ctx, id, setup.Tables), setup.Config)
}

func (l legacySink) Open(ctx context.Context) (OpenResult, error) { return l.sink.Open(ctx) }

func (l legacySink) Deliver(ctx context.Context, b Batch) (DeliverResult, error) {
	return l.sink.Deliver(sinkctx.ForDeliver(ctx, b.Replay, b.GapBefore, b.Epoch), b.Events)
}

func (l legacySink) Close(ctx context.Context) error { return l.sink.Close(ctx) }
