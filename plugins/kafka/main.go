// Command walcast-sink-kafka produces every change to a Kafka topic per
// table, `<topic_prefix>.<schema>.<table>`, keyed by the row key so that a
// row's changes stay in one partition and in commit order.
//
// With eos = true (the default) each Deliver is one Kafka transaction: the
// batch's records plus a checkpoint record {transactional id → last event
// id} in a compacted checkpoint topic, then commit. The invariants:
//
//   - Deliver returns nil only after the commit succeeded, so the host
//     records an ack only for events a read_committed reader can see.
//   - The checkpoint topic holds, for each transactional id, the last
//     event id committed under it, in the same transaction as the events:
//     they are visible together or not at all.
//   - Open (and every reconnect after a failure) first claims the
//     transactional id, which bumps the producer epoch, aborts whatever a
//     predecessor left open and fences it, and only then reads the
//     checkpoint back; events at or below it are never produced again.
//   - A producer that learns it has been fenced never commits again: every
//     later Deliver fails permanently.
//
// Filtering at or below the checkpoint is only sound when batches commit in
// id order, so the sink asks the host for ordered delivery (Info.Ordered).
//
// With eos = false the producer is idempotent but not transactional: each
// record lands once per send, and a batch the host redelivers lands again.
package main

import "github.com/walcast/walcast/pluginkit"

func main() { pluginkit.ServeBatch(New()) }
