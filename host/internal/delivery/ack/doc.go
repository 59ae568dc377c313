// Package ack follows every event from capture to resolution and derives
// the two positions that make walcast crash-safe:
//
//   - per sink, its position: the highest event id such that every event
//     at or below it is resolved (delivered, filtered out, skipped as
//     already delivered, or parked) for that sink. It is what the
//     checkpoint store persists (the sink's checkpoint), and what a
//     restarted sink skips up to.
//   - for the slot, the flush LSN: the end LSN of the last transaction
//     whose every event is resolved for every durable sink. Only that is
//     ever confirmed to PostgreSQL.
//
// In: events added in id order and transaction ends (from the fan-out,
// on capture's goroutine); resolutions, per sink and in any order (from
// each sink's scheduler). Out: Flush for the capture's confirmations;
// Positions for the checkpoint writer, metrics and logs; Backlog for
// status.
//
// Event states, per sink: added (queued or in flight) → resolved. Sinks
// resolve events in any order (parallel lanes finish out of order); a
// position only moves over a contiguous prefix of resolved events, and a
// transaction is released only when it is committed and resolved for every
// durable sink. Invariant: the flush LSN never passes an event that a
// durable sink has not resolved.
//
// Releases (the flush LSN over committed transactions) is shared with
// library mode, which resolves by acknowledgement instead of by sink.
package ack
