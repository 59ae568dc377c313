// Package rules holds what a sink's pipeline block says about each event
// beyond tables and ops: a filter (which events it receives), a transform
// (which columns, under which names and in which form) and a route (which
// named destination: a Kafka topic, a webhook path, an SSE channel …).
// Expressions are CEL (cel.dev/cel-go), compiled and type-checked once
// per sink by Compile; Apply runs them on one event.
//
// In: an event as the decoder wrote it (cdc.Event, the walcast envelope).
// Out: whether the sink receives it, and if so the event it receives:
// the same id, its key, payload and old key transformed, its route set.
//
// Invariants:
//
//   - Expressions see the event as captured, never a transformed one:
//     the filter, the route and every computed field read the same
//     values whatever the transform drops, masks or renames.
//   - The id, op, schema, table, xid and commit time never change.
//   - A masked or dropped column appears nowhere in what Apply returns:
//     not in key, new, old nor unchanged, and not in the old key.
//   - Apply never panics and never half-applies: it returns the event
//     transformed, or the event untouched with the expression's error
//     (the scheduler parks that event and goes on).
//   - Rows are read where they lie in the envelope (no JSON decoding of
//     the whole event): new.status looks up one member of the raw "new"
//     object (row.go, scan.go).
//   - The fast path changes nothing a sink receives: a filter or route
//     made only of comparisons, boolean logic, arithmetic, conversions,
//     columns and op, schema, table, xid is evaluated without CEL
//     (fast.go), and whenever that evaluation meets anything but a plain
//     result (an error, a NaN, a map) the event is evaluated with CEL,
//     which gives every error. Both give the same result (fast_test.go).
//   - A transform that touches none of an event's columns returns its
//     payload itself, not a copy.
//
// Cost: Apply allocates nothing for a filter or a route on the fast path
// (one string for a route it builds), and one exact-size payload for a
// transform that changes the event; make bench's rules paths and the
// BenchmarkApply* benchmarks measure it (docs/benchmarks.md).
package rules
