// Package backfill streams the rows a table already holds through the
// replication slot, as read events.
//
// A backfill reads its table in keyset-paginated chunks on the key live
// events carry (the replica identity index, else the primary key). Each
// chunk is one transaction that
//
//  1. locks the backfill's row in walcast.backfills (FOR UPDATE) and reads
//     its state and the last key done;
//  2. reads the next rows after that key FOR SHARE, in key order, up to the
//     chunk's bound (the limit-th key, counting every row), only the
//     columns the pipeline's publication publishes and only the rows its
//     publications' row filters keep, read from the catalog in the same
//     transaction (Table.Restrict); a chunk the filter leaves empty still
//     advances to its bound;
//  3. writes them into the WAL as one transactional logical decoding
//     message (decode.BackfillPrefix), which the decoder turns into read
//     events with ids <commit_lsn>:<index> like every other event;
//  4. records the new last key and counts in walcast.backfills, and commits.
//
// Invariants:
//
//   - Progress and the chunk's message commit together: after a crash the
//     chunks on record are exactly the chunks in the WAL, which the slot
//     keeps until every sink has them. A chunk is never read twice; the
//     interrupted one rolled back and is read again.
//
//   - A read row is never older than a change of the same key that precedes
//     the chunk in the stream: FOR SHARE makes every concurrent UPDATE or
//     DELETE of a chunk row wait until the chunk commits (so it follows the
//     chunk in commit order), and READ COMMITTED row locking returns the
//     newest committed version of each row. FOR KEY SHARE would not do: it
//     lets a non-key UPDATE commit between the read and the chunk's commit,
//     so the stream would carry that update before an older read.
//
//   - At most Window chunks are written and not yet acknowledged by the
//     sinks, over every backfill of the pipeline: the runner works through
//     them one at a time with one window, and after a (re)start it writes
//     nothing until the stream is acknowledged past where the WAL was
//     when it started, since chunks written before may still be
//     unacknowledged. A chunk counts as acknowledged once the stream is
//     past the WAL position read just after its commit. So backfills fill
//     neither memory nor the slot.
//
//   - A resync (walcast resync) is a backfill whose start writes a
//     resync_begin marker message (decode.ResyncPrefix) in the statement
//     that marks it running, and whose last chunk writes a resync_end
//     marker after its rows, in the chunk's transaction: the markers are
//     in the WAL exactly when the resync started and when it finished,
//     and every row read by it lies between them. A cancelled or failed
//     resync writes no end marker.
//
// Backfill states: queued → running → done | cancelled | failed.
//
// In: requests (Request: walcast backfill, backfill_new_tables at a start),
// the tables' rows, and Config.Flushed, the position every durable sink
// has acknowledged. Out: chunk messages in the WAL, which capture and
// decode turn into read events, and the progress rows of
// walcast.backfills. The store (store.go) is the backfill tables' reader
// and writer; their DDL is among the walcast schema's migrations, which
// the caller runs first.
package backfill
