// Package schedule runs one sink's deliveries: the sink's filter, batching,
// per-row ordering lanes, rate limit, retries with backoff, isolation of
// failing rows, parking and replay.
//
// In: the sink's queue of events (fanout.Queue), in commit order, and
// replay requests. Out: batches to the sink (Deliverer, in the terms of
// package attempt), acknowledgements to the tracker (ack.Tracker), parked
// events to walcast.parked (ParkStore). An event is acknowledged only once
// the sink's answer says it is delivered.
//
// Event states, for one sink:
//
//	queued → pending → in flight → delivered            (resolved)
//	                 ↘ filtered out / skipped           (resolved)
//	                   in flight → failed → pending (backing off, isolated)
//	                                      → parked      (resolved)
//	                   in flight → held back → pending  (behind a failed event)
//
// A failed batch fails every event of it; the scheduler splits it over its
// next attempts to find the event that fails on its own. An answer that
// names failed events (attempt.Result.Failed) fails only those, each by
// its own kind, and delivers the rest at once, except what must go after a
// failed event (the order relation below; in strict order, everything
// after it), which is held back and goes again after it.
//
// Invariants: two events of the same row (schema.table + key) are never in
// flight at once and never delivered out of commit order (an update that
// changes the key belongs to both rows; an outbox event's row is its
// aggregate, Config.Outbox); a truncate of a table, a schema
// event, a resync marker and a partition's detach event of a table
// (cdc.Op.TableWide) are barriers
// for that table: each goes only once every earlier event of the table is
// resolved, and no later event of the table goes before it is resolved;
// nothing is resolved before it is delivered, filtered, skipped as already
// delivered, or durably parked; a parked event leaves walcast.parked only
// once the sink wrote it (a replayed event it calls a duplicate stays).
// Replayed events travel in batches of their own, flagged as a replay.
//
// # Parking and replay
//
// Order is one relation, "a must go before b", between two events of one
// sink and one table, a earlier than b (by id): they share a row (either
// row of a key change), or either of them is a truncate of the table. A
// TRUNCATE naming several tables is one truncate event per table, each a
// barrier in its own table only. Parking and replay keep that relation:
//
//   - An event is parked behind every parked event that must go before it:
//     a later event of a parked event's row; every later event of a table
//     whose truncate is parked; a later truncate of a table with any parked
//     event (a truncate never overtakes a parked row: delivered first, the
//     row's replay would resurrect what the source truncated). This holds
//     on arrival, and for pending events when an event they wait for fails
//     and parks: what must go after it parks behind it, and what must go
//     after those, in turn.
//   - A replay never delivers an event without every parked event that
//     must go before it (ReplaySet): replaying a row parked behind a
//     parked truncate brings the truncate along, and the truncate brings
//     every event of its table parked before it (so, across several
//     truncates, the table's history up to the last one asked for).
//     Replayed events take their place among pending ones in id order and
//     follow the same row and barrier rules as live ones.
//   - A row, or a table behind its truncate, flows again only once nothing
//     of it is left in walcast.parked. What is parked behind a replay while
//     it runs is delivered by it before it ends: later events of the rows
//     it replays (and of rows a key change links to them), events of a
//     table whose truncate it replays, and a truncate of a table every
//     parked row of which it replays. Anything else stays parked for the
//     next replay.
//
// A consumer that applies what it receives in arrival order (first copy of
// each id) therefore ends, once everything parked has been replayed, with
// the rows of the source.
package schedule
