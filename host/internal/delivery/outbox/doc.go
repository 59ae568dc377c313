// Package outbox turns the rows an application inserts into its outbox
// table into the events it meant to publish, the way Debezium's Outbox
// Event Router does (docs/outbox.md).
//
// In: one captured event of a sink's outbox table (cdc.Event, the walcast
// envelope). Out: whether the sink receives anything for it, and if so
// the event it receives: the payload column as the body, the aggregate id
// as the key, route prefix + aggregate type as the route, the row's id
// and type as headers. The scheduler (package schedule) calls Apply where
// it applies a sink's rules, and orders the event in the aggregate's lane.
//
// Invariants:
//
//   - Only an insert publishes: an update, a delete, a truncate and every
//     other event of the outbox table (a backfill's read, a schema event)
//     is resolved at once (Keep is false) and never holds the slot back.
//     Applications delete an outbox row right after inserting it.
//   - The event id (<commit_lsn>:<index>) is the captured one: an outbox
//     event redelivered after a crash has the id it had.
//   - One aggregate is one lane: Lane is the aggregate id's raw JSON, the
//     same for every event of the aggregate whatever the outbox row's own
//     key, so the scheduler never has two of them in flight at once and
//     delivers them in commit order.
//   - Nothing is dropped silently: a NULL or missing aggregate id,
//     aggregate type or payload is an error naming the column (the
//     scheduler parks the event; `walcast replay` redelivers it once the
//     pipeline file is fixed). Apply never panics and never half-applies.
//   - The row is read where it lies in the envelope: one pass over the
//     raw "new" object, no JSON decoding of the event.
package outbox
