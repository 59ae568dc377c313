// Package change holds the event as the engine carries it from decoding to
// the sinks' schedulers: what a sink receives (pluginkit/cdc.Event) plus the
// routing facts only the host uses, which never cross the plugin boundary.
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
	// without scanning the JSON back (a third of its CPU per change).
	Layout Layout
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
