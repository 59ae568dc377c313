// Package isolate keeps a slow durable sink from slowing the others.
//
// In: a durable sink of a pipeline with several sinks, its place in the
// pipeline's fan-out and tracker, and a way to build its scheduler. Out:
// the sink delivered, from the pipeline's stream or from a catch-up
// stream of its own; its position while detached (Sink.Position, for the
// checkpoint writer); its mode and lag (metrics, walcast status); and
// walcast.catchup_slots, the record of its catch-up slot.
//
// A sink is live, catching up or rejoining:
//
//   - live: it reads the pipeline's stream like every sink.
//   - detaching → catching up: when it holds the stream back for longer
//     than Policy.After (the fan-out waits for room in its queue), is
//     paused, its deliveries fail while its queue is more than half full
//     (a destination that is down: waiting would only stall the others),
//     or its backlog passes Policy.LagBytes, its catch-up slot is
//     recorded in walcast.catchup_slots, the pipeline's slot is copied into
//     it (pg_copy_logical_replication_slot: the copy starts where the
//     pipeline's slot is, which is never past this sink's position because
//     the sink still holds it back at that moment), and only then is the
//     sink detached from the fan-out and the ack tracker. From there the
//     pipeline's slot follows the other sinks and the catch-up slot holds
//     what this sink still needs. The sink streams from its slot at its own
//     pace through its own capture, decoder, fan-out, tracker and
//     scheduler (the same packages), skipping what its position covers.
//   - rejoining: once its stream is within Policy.RejoinLagBytes of the
//     pipeline's (what it resolved, not what it read) and it is
//     delivering, the fan-out queues events for it again from the next one
//     on (boundary: the last event the pipeline handed over before), while
//     the catch-up stream delivers everything up to the boundary and stops
//     at the first event past it. When that is all resolved the catch-up
//     scheduler stops, the live one starts on the queued events, and only
//     then is the catch-up slot dropped and its row deleted. Events of one
//     row are never delivered by both at once. A rejoining sink whose queue
//     fills up detaches again (the catch-up stream simply goes on).
//
// Every step is safe to kill: a row without its slot is forgotten (the
// sink never left the pipeline's slot, or had rejoined it); a row with its
// slot makes the next start begin in catch-up from that slot; a slot named
// like a catch-up slot of the pipeline without a row is dropped.
package isolate
