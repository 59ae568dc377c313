// Package source is the first stage of a pipeline: everything that reads
// the source database. It holds no code; its packages are, in the order an
// event passes through them:
//
//	pgoutput  parses the messages of PostgreSQL's pgoutput plugin
//	          (protocol version 1) as they arrive from the slot
//	decode    keeps the relation cache and the open transaction and turns
//	          each change into a change.Event with its JSON envelope; a
//	          backfill's chunk messages become read events
//	capture   owns the pipeline's one replication connection: checks and
//	          prepares the source (publications, slot), streams the slot
//	          through pgoutput and decode, confirms positions back
//	backfill  reads the rows a table already holds and writes them into
//	          the WAL in chunks, so that they come back through the slot
//	          in stream order like any other change
//
// In: the pipeline's replication slot, its captured tables and their
// publications; from downstream, the position up to which every durable
// sink has resolved the stream (capture.Consumer's Commit and flush
// position, backfill.Config.Flushed).
//
// Out: change.Events in stream order (commit LSN, then index within the
// transaction) handed to a capture.Consumer, one call at a time; positions
// confirmed back to the slot; chunk messages in the WAL.
//
// Invariants:
//
//   - Nothing is confirmed to the slot before the consumer reported it
//     resolved: the source never decides what is durable.
//   - Event ids are <commit_lsn>:<index> and strictly increase; after a
//     reconnect PostgreSQL resends from the slot's confirmed position and
//     capture skips what it handed over, so a consumer sees each event once
//     per process.
//   - A backfill chunk's message and its recorded progress commit together:
//     the chunks on record are exactly the chunks in the WAL.
//   - The source imports nothing of the delivery or control planes, only
//     the shared vocabulary (change, pg, pluginkit/cdc). What a start needs
//     of the control plane it declares itself (capture.Ledger), and its
//     callers give it.
package source
