// Package ack follows every event from capture to resolution and derives
// the two positions that make walcast crash-safe:
//
//   - per sink, the watermark: the highest event id such that every event
//     at or below it is resolved (delivered, filtered out, skipped as
//     already delivered, or parked) for that sink. It is what the
//     checkpoint store persists, and what a restarted sink skips up to.
//   - for the slot, the flush LSN: the end LSN of the last transaction
//     whose every event is resolved for every durable sink. Only that is
//     ever confirmed to PostgreSQL.
//
// Event states, per sink: added (queued or in flight) → resolved. Sinks
// resolve events in any order (parallel lanes finish out of order); a
// watermark only moves over a contiguous prefix of resolved events, and a
// transaction is released only when it is committed and resolved for every
// durable sink. Invariant: the flush LSN never passes an event that a
// durable sink has not resolved.
package ack
