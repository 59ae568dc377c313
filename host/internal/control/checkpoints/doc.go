// Package checkpoints holds each sink's checkpoint (walcast.checkpoints):
// the stored position of the sink, an event id such that every event at
// or below it is resolved for that sink (delivered, parked or skipped).
// A start resumes each sink after its checkpoint; the slot is confirmed
// only up to what every durable sink's checkpoint covers.
//
// In: the positions the daemon's tracker reports, written every
// checkpoint interval, before each position recorded as confirmable to
// the slot (lineage.Store.RaiseConfirmLimit), and once at shutdown. Out:
// the checkpoints, for the next start, `walcast status` and the console.
//
// Invariants:
//
//   - A checkpoint never moves backwards: Save keeps a stored checkpoint
//     that is higher than the one written, comparing (commit LSN, index),
//     not the text of the event id.
//   - Checkpoints belong to one slot incarnation (package lineage): they
//     are cleared only when an accepted gap replaces the slot (Clear, in
//     the transaction that records the gap).
package checkpoints
