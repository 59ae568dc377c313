// Package capture owns the one replication connection of a pipeline.
//
// In: the source database (its slot, tables and publications), and from
// the Consumer the position it has resolved. Out: change.Events in stream
// order to the Consumer, and that position confirmed to PostgreSQL.
//
// It prepares the source: Preflight lists, without changing anything,
// every reason a start would fail (wal_level, the role's REPLICATION
// attribute and grants, the captured tables, an existing publication or
// slot); Check refuses on any of them and remembers what exists; Prepare
// creates the publication and the pgoutput slot when missing; Undo
// removes what a start created when it fails before streaming. A start
// goes Check → Prepare → stream, or Check [→ Prepare] → Undo.
//
// What a start needs of the control plane (walcast's schema, and its
// record of the pipeline's source: slot, publication, identity, confirm
// limit, accepted gaps, published tables, the sinks' checkpoints) capture
// declares as Ledger (ledger.go); the caller gives the implementation, so
// capture imports nothing of the control plane. Prepare refuses with a
// GapError when that record shows the slot is not the one the pipeline
// streamed from (lost, invalidated, moved, from another cluster) or a
// table left the publication: streaming on would hide lost changes.
//
// It streams pgoutput protocol version 1 from the slot, has each message
// decoded into events and hands them, in stream order, to a Consumer. It
// never decides what is durable: it confirms to PostgreSQL only the
// position the Consumer reports, and with nothing in flight lets
// keepalives advance it so that an idle captured table never pins WAL.
//
// The capture goroutine is the only user of the replication connection. It
// answers the server even while the Consumer applies backpressure: the
// Consumer calls back (the idle function passed to Event) while it waits,
// and the status update is sent from there, so a slow sink can never make
// the walsender time out.
//
// A stream on which nothing arrives for the receive timeout (by default
// twice the server's wal_sender_timeout) is ended and reconnected: a
// connection a NAT or firewall dropped, or whose server vanished, would
// otherwise stay open and silent for as long as the kernel keeps it.
// Halfway through the timeout the stream asks the server for a keepalive,
// so an idle but healthy stream is always heard from (silence.go).
//
// After a lost connection it reconnects with backoff; PostgreSQL then
// resends everything after the slot's confirmed position, and capture skips
// every event and commit it already handed over, so a Consumer sees each
// exactly once per process.
//
// Over TCP on Linux the replication socket is read in batches while a
// backlog streams (batchread.go): the walsender then pays for one wake-up
// of this process per 64 KiB instead of one per change, and a change that
// arrives alone is still read at once.
package capture
