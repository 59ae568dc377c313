// Package report reads what a pipeline's operators are shown, for
// `walcast status` (text and JSON) and the web console (HTML): one
// gatherer, so that both show the same facts read the same way.
//
// In: a Pipeline (its name, slot and sinks as the pipeline file declares
// them, its control plane and the source database it lives in) and the
// Parts a view wants beyond the core. Out: a State, which the views render
// without another read; and Bytes, the one way a quantity of bytes is
// written for people.
//
// Invariants:
//   - Gather only reads: it changes nothing in the source database, so it
//     runs from any machine, next to a daemon or not. The walcast schema
//     must exist (schema.Migrate).
//   - Each part is read once, in a fixed order; on an error Gather returns
//     the parts read before it, and the error.
//   - What only the leading daemon knows (a sink's backlog, its
//     replication streams) is kept only while its report is fresh by the
//     database's clock: an older one is from a daemon that stopped or lost
//     the lead, and says nothing of now.
package report
