package change

import (
	"time"

	"github.com/walcast/walcast/pluginkit/cdc"
)

// Event is one decoded change on its way through the host.
type Event struct {
	cdc.Event
	// OldKey is the key before an update that changed it, nil otherwise.
	// The scheduler orders such an update after the earlier changes of
	// both rows; plugins see it in the envelope's "old".
	OldKey []byte
	// Sinks, on a backfill's read event, names the sinks it was asked
	// for; nil means every sink. The fan-out resolves the event at once
	// for every other sink.
	Sinks []string
	// Layout, when Set, says where the envelope's parts are in Payload,
	// as the decoder wrote them, so that library mode builds its Event
	// without scanning the JSON back (what that scan cost:
	// docs/benchmarks.md, "Issue 16: where each µs per change goes").
	Layout Layout
	// Formats are the event in the decoder's other output formats
	// (decode.Options.Formats), in their order; the fan-out hands a sink
	// the one it chose instead of the envelope.
	Formats []Encoded
	// Err, in library mode, is the failure of the stream's filter or
	// transform on this event (host.StreamConfig.Filter): the event is
	// handed over as captured with it.
	Err error
}

// Encoded is an event in an output format other than the envelope: what
// replaces cdc.Event's Key and Payload, and OldKey, for the sinks that
// chose it. Key and OldKey are row identities in that format, so a sink's
// scheduler orders and parks its rows exactly as with the envelope.
type Encoded struct {
	Key, OldKey, Payload []byte
}

// Layout locates the parts of an envelope in its payload. Ranges are
// [start, end) byte offsets of the raw JSON value ("null" included);
// Unchanged is zero when the envelope has no "unchanged" list.
type Layout struct {
	Set                      bool
	XID                      uint32
	CommitTime               time.Time
	New, Old, Unchanged      [2]int
	Cascade, RestartIdentity bool
}

// IdleEvery is how often a consumer of the capture's stream, blocked by
// backpressure (a durable sink's full queue, library mode's full buffer),
// calls the idle function the capture handed it with the event: well
// within any sane wal_sender_timeout, so that the capture loop keeps
// answering the server however long a sink holds the stream back.
const IdleEvery = 200 * time.Millisecond
