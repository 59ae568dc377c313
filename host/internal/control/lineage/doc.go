// Package lineage holds what a pipeline streams from and where its
// checkpoints belong, so that a start can tell whether the slot and the
// publication are still the ones the checkpoints were made on:
//
//   - the pipeline record (walcast.pipelines): the slot and publication
//     names, and whether walcast created the publication (teardown drops
//     only what walcast created);
//   - the identity (on the same row): the cluster (system_identifier),
//     the database and the incarnation of the slot (where walcast created
//     or adopted it);
//   - the confirm limit (on the same row): the furthest position walcast
//     may have confirmed to the slot, so that a slot confirmed beyond it
//     was moved by someone else;
//   - the gaps an operator accepted (walcast.gaps), and how each table
//     was published when walcast last checked (walcast.published_tables).
//
// In: what capture's Prepare finds and decides at a start, and each
// position the daemon is about to confirm (RaiseConfirmLimit). Out: the
// same, read back by the next start (capture's history check), `walcast
// status` (gaps) and teardown (what walcast created).
//
// Invariants:
//
//   - The confirm limit is raised before the slot is confirmed up to it,
//     and RaiseConfirmLimit never lowers it; it is set or cleared only
//     around the creation or adoption of a slot (SetConfirmLimit,
//     ForgetSlot).
//   - An accepted gap is one transaction: the gap of every sink, the old
//     slot's checkpoints cleared (package checkpoints) and the new
//     identity, or none of them.
//   - A database without the walcast schema reads as no record, no gap
//     and no published tables.
package lineage
