// Package capture owns the one replication connection of a pipeline.
//
// It prepares the source: Preflight lists, without changing anything,
// every reason a start would fail (wal_level, the role's REPLICATION
// attribute and grants, the captured tables, an existing publication or
// slot); Check refuses on any of them and remembers what exists; Prepare
// creates the publication and the pgoutput slot when missing; Undo
// removes what a start created when it fails before streaming.
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
