// Package pg is what walcast knows of PostgreSQL's rules, in one place
// every other package of the engine can import (it imports nothing of the
// engine itself):
//
//   - walcast's own schema in the source database (ControlSchema), which
//     is never captured, and the NOTIFY channel that wakes a running
//     walcast (ControlChannel);
//   - the naming rule for replication slots, which walcast also applies to
//     publications and pipeline names (SlotProblem), and how to write any
//     other name into a statement an operator copies (Ident);
//   - which errors of the source retrying can fix (the server restarting,
//     the network, too many connections, a serialization failure) and
//     which it cannot (a missing privilege, a wrong password, a database
//     or table that does not exist): Permanent, which every loop that
//     retries work against the source asks before retrying. Explain turns
//     a permanent error into the one line an operator needs: the role, the
//     object, and the GRANT or setting that fixes it.
package pg

// ControlSchema is walcast's schema in the source database: checkpoints,
// parked events and the rest of the control plane. It is never captured:
// changes to its tables are dropped even when a FOR ALL TABLES
// publication includes them.
const ControlSchema = "walcast"

// ControlChannel is the NOTIFY channel a command wakes a running walcast
// with after writing into the control schema (a replay request, a pause
// or resume, a backfill request). A running walcast also polls, so a lost
// notification only delays.
const ControlChannel = "walcast_control"
