// Package leader decides which walcast process streams a pipeline when
// several run it: the one whose dedicated connection to the source
// database holds the pipeline's session-level advisory lock. The source
// database is the coordinator every pipeline already depends on, so there
// is no other service and no consensus of our own.
//
// States of one process:
//
//	standby ──lock acquired──▶ leader ──session lost──▶ lost (stop delivering at once)
//	   ▲                          │
//	   └────────── Release ◀──────┘ (graceful stop: the lock goes with the session)
//
// How a term ended is recorded in walcast.leaderships, through the lock
// session: a new leader clears released_at when it takes the lock, and
// Release sets it just before closing the session. A successor that finds
// it set knows the previous leader stopped on purpose and starts at once;
// one that finds it clear (the previous leader was killed, frozen or cut
// off) waits out that leader's lease first.
//
// In: the source database's DSN and the pipeline's name. Out: a Lease
// (Acquire), through which the daemon's control-plane writes go for the
// term, and which says when it is lost; for `walcast status`, who leads
// (Current) and who stands by (Standbys, from every process's Presence).
//
// Invariants:
//
//   - At most one session holds the lock: PostgreSQL guarantees it.
//   - A leader learns it lost its session within CheckInterval plus a ping
//     timeout, and Lost is closed then; the daemon stops delivering.
//   - A write made through the lease (Exec, Begin) runs on the lock's own
//     session, so it cannot succeed once that session is gone: a paused
//     old leader that wakes up after a standby took over cannot move a
//     checkpoint or park an event. Slot confirmations are fenced by PostgreSQL itself:
//     a slot streams to one walsender at a time (its active_pid).
//   - A successor that stood by for another leader streams only once that
//     leader can no longer deliver: it released the lock after its term
//     ended (the released mark, written on its own session, cannot be
//     written by a leader that lost that session), or its lease's
//     freshness window has passed since the successor took the lock.
//   - The server notices a dead client through TCP keepalives set on the
//     lock session (KeepaliveIdle + KeepaliveInterval × KeepaliveCount),
//     which bounds how long a crashed machine keeps the lock; a process
//     that exits or is killed closes its socket and frees it at once.
package leader
