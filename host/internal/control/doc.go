// Package control is walcast's control plane: what walcast keeps about
// each pipeline in the walcast schema of the source database, and which
// process may write it. The source database is used because it already
// exists, is durable and is reachable from every walcast command; the
// schema is never captured (pg.ControlSchema: the publication never names
// it and the decoder drops it).
//
// The control plane is split by concern, one package each, the reader
// and the writer of each table side by side:
//
//	schema       every table's DDL, the ordered migrations (Migrate), the
//	             access check of a start, and the deletes that span every
//	             table (Forget, DropUnused)
//	checkpoints  each sink's checkpoint (walcast.checkpoints)
//	lineage      what a pipeline streams from and where its checkpoints
//	             belong: the pipeline record, the cluster identity and slot
//	             incarnation, the confirm limit, accepted gaps, published
//	             tables
//	parked       parked events and replay requests
//	pauses       operator pauses
//	reports      what the leading daemon reports for `walcast status` and
//	             the console: usage, backlogs, streams, sink failures
//	leader       which process leads a pipeline (an advisory lock) and how
//	             its last term ended (walcast.leaderships)
//
// This package holds only what they share: the Querier every store takes,
// Beginner for writes that commit together, the NOTIFY Channel and Notify
// with which the CLI wakes a running daemon, and NoSchema, which tells a
// database walcast never initialised.
//
// In: statements from the daemon (through the leader's lease while it
// leads, so that a leader that lost its session cannot write), the CLI,
// the console and library mode. Out: rows, read back by the same, and
// notifications to a running daemon. Nothing flows on downstream: the
// control plane is where the engine's progress is recorded, not a stage
// of an event's path.
//
// Invariants:
//
//   - Every row belongs to one pipeline (its pipeline column), and every
//     store is made for one pipeline.
//   - The stores assume schema.Migrate ran: it is the only writer of DDL.
//   - Checkpoints are written a few times a second at most, never per
//     event, so the control plane adds little WAL.
package control
