// Package epochs holds the rule by which the built-in sinks that keep a
// checkpoint of their own (postgres, kafka, redis, s3) skip what they
// already wrote, with the epoch of the ids (pluginkit.Batch.Epoch).
//
// Event ids are ordered within one epoch only: after a failover, a
// restored database or a lost slot, the new slot's ids can be lower than
// the ones written before. A checkpoint therefore says nothing about a
// batch of another epoch, which is written whole; the checkpoint then
// moves to that batch's last id, lower or not. An empty epoch (a host or
// a sink from before epochs) matches any, so an upgrade re-accepts
// nothing.
package epochs

import (
	"cmp"

	"github.com/walcast/walcast/pluginkit"
)

// Checkpoint is the last event id a sink wrote and the epoch of the batch
// that wrote it (empty when written by a host or a sink that predates
// epochs).
type Checkpoint struct {
	ID    pluginkit.EventID
	Epoch string
}

// Filters reports whether the checkpoint says anything about the ids of a
// batch of epoch: only within one epoch (an empty one on either side
// matches).
func (c Checkpoint) Filters(epoch string) bool {
	return epoch == "" || c.Epoch == "" || epoch == c.Epoch
}

// Covers reports whether id, of a batch of epoch, is at or below the
// checkpoint: written already.
func (c Checkpoint) Covers(id pluginkit.EventID, epoch string) bool {
	return c.Filters(epoch) && id.Compare(c.ID) <= 0
}

// After is the checkpoint once a batch of epoch whose last written event
// is last has been written. Within an epoch it never moves back; the
// first batch of a new epoch moves it to last, lower or not, with its
// epoch; an empty epoch keeps the stored one. A replay batch (parked
// events, of whatever epoch) moves neither: a parked event of an earlier
// epoch has ids that say nothing about the current one's.
func (c Checkpoint) After(last pluginkit.EventID, epoch string, replay bool) Checkpoint {
	switch {
	case replay:
		return c
	case !c.Filters(epoch):
		return Checkpoint{ID: last, Epoch: epoch}
	}
	next := Checkpoint{ID: c.ID, Epoch: cmp.Or(epoch, c.Epoch)}
	if last.Compare(c.ID) > 0 {
		next.ID = last
	}
	return next
}
