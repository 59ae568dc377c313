// Command walcast-sink-s3 writes every change to S3 or an S3-compatible
// object store (MinIO, Ceph, R2, GCS's interoperability endpoint), as JSON
// lines or Parquet, one object per batch, table and commit date:
//
//	<prefix>/<schema>.<table>/date=YYYY-MM-DD/<first id>_<last id>.<ext>
//
// The invariants:
//
//   - An object appears whole or not at all: one PUT, or a multipart
//     upload completed only once every part is up (and aborted otherwise).
//   - A key follows from the events in the object only (their table, commit
//     date, first and last id), so the same events written again overwrite
//     the same object with the same bytes.
//   - Deliver returns nil only after every object of the batch and then
//     the checkpoint object are written; the checkpoint is the batch's
//     last event id and its epoch (Batch.Epoch, which names the series of
//     ids). Batches come one at a time in id order (Info.Ordered), so every
//     event of that epoch at or below the checkpoint is stored (parked
//     events aside, which a replay writes later without moving the
//     checkpoint).
//   - Open reads the checkpoint back and reports it with its epoch, so
//     walcast skips what is stored even when walcast.checkpoints is
//     behind; the sink itself skips any event at or below it that still
//     arrives in a batch of its epoch (replays aside). A batch of another
//     epoch (a failover: the new slot's ids can be lower) is written whole
//     and moves the checkpoint, with its epoch, to its last id.
//   - An acknowledged event is never taken out of the bucket: it is in the
//     object the batch that acknowledged it wrote, and that object is
//     overwritten only by a batch holding the same first and last events,
//     which were acknowledged with it, lie at or below the checkpoint and
//     are skipped (a replay carries parked events only, never acknowledged
//     ones). This holds within an epoch: a later epoch's events whose
//     table, commit date, first and last ids all equal an earlier object's
//     would land on its key.
//
// What remains: the events of a batch interrupted after some of its
// objects were written and before its checkpoint (a crash, a failed or
// timed-out attempt) are delivered again, possibly cut into batches with
// other bounds, so they may end up in two objects (docs/sinks.md).
package main

import "github.com/walcast/walcast/pluginkit"

func main() { pluginkit.ServeBatch(New()) }
