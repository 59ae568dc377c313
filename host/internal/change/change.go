// Package change holds the event as the engine carries it from decoding to
// the sinks' schedulers: what a sink receives (pluginkit/cdc.Event) plus the
// routing facts only the host uses, which never cross the plugin boundary.
package change

import "github.com/walcast/walcast/pluginkit/cdc"

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
}
