// Package delivery groups the packages that take the decoded stream to
// the sinks and account for every event on the way back.
//
// In: change.Events, in stream order, from the source (package capture,
// or a catch-up stream of package isolate). Out: Deliver calls on each
// sink's plugin client, and the positions that make walcast crash-safe:
// per sink its position (what its checkpoint stores), for the slot the
// flush LSN capture confirms.
//
//	change.Event ─▶ fanout ─┬▶ queue ─▶ schedule ─▶ Deliver (plugin/sinkclient)
//	                        └▶ queue ─▶ schedule ─▶ …            │ resolved
//	flush LSN, positions ◀── ack.Tracker ◀────────────────────────┘
//
// The packages, in the order an event meets them:
//
//   - fanout gives each sink a bounded queue; a full durable queue holds
//     the stream back, a full non-durable one drops for that sink only;
//   - schedule runs one sink's policy: filter, batching, per-row lanes,
//     the truncate barrier, rate limit, retries, parking and replay;
//   - outbox turns inserts into a sink's outbox table into the events the
//     application wrote there; schedule applies it where it applies rules;
//   - ack turns resolutions into each sink's position and the flush LSN:
//     neither ever passes an event a durable sink has not resolved;
//   - isolate detaches a sink that falls behind onto a catch-up slot of
//     its own and rejoins it to the live stream.
//
// What they persist (parked events, usage, catch-up slots) they write
// through stores of the control plane (host/internal/control) that their
// caller passes in; isolate also runs a capture of its own for each
// catch-up slot.
package delivery
