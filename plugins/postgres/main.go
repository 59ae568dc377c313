// Command walcast-sink-postgres writes the change stream into another
// PostgreSQL database, in one of two modes.
//
// mode = "mirror" keeps, for each source table, a table of the same rows
// in the target: inserts, updates and backfilled rows are upserted by the
// target's primary key, deletes delete, an update that changes the key
// deletes the old key's row, a truncate truncates. Values reach the
// target's column types through PostgreSQL's own input functions
// (jsonb_populate_record), so a target table made from the source's
// definition (pg_dump --schema-only) holds the same values; a missing
// table is created with jsonb columns unless create_tables = false.
//
// mode = "history" appends every event as one row of a history table
// (id, lsn, idx, op, key, new, old, commit_time, ...), keyed by the event
// id.
//
// The invariants:
//
//   - Deliver returns nil only after its transaction committed.
//   - Mirror: each batch's transaction also moves the sink's checkpoint
//     row (checkpoint_table, checkpoint_key) to the last event it applied,
//     after reading it under a row lock; events at or below it are never
//     applied again (they are duplicates), so every change is applied
//     exactly once, in commit order, whatever crashed when. Open reports
//     the checkpoint so the host skips them before sending. Filtering at or
//     below the checkpoint is sound only when batches commit in id order,
//     so the sink asks for ordered delivery (Info.Ordered).
//   - History: the primary key (lsn, idx) stores each event once; a
//     redelivered event is skipped and counted as a duplicate.
//   - A row the target refuses (a value its column type rejects, a
//     constraint) fails only its own event, named in a BatchError; the
//     events before it are committed.
package main

import "github.com/walcast/walcast/pluginkit"

func main() { pluginkit.ServeBatch(New()) }
