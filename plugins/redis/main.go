// Command walcast-sink-redis appends every change to a Redis stream per
// table (XADD to "<stream_prefix>:<schema>.<table>", or the key `streams`
// names), one entry per event with the fields id, op, table, key and event
// (the envelope).
//
// Each Deliver is one MULTI/EXEC transaction: the batch's XADDs, then
// HSET <checkpoint_key> id <last event id> id_epoch <the batch's epoch>.
// The invariants:
//
//   - Deliver returns nil only after EXEC succeeded, so the host records an
//     ack only for entries every reader of the stream can see.
//   - The checkpoint hash holds the last event id written by this sink, in
//     the same transaction as the entries: they are visible together or
//     not at all (Redis runs a transaction as one command).
//   - Open (and every reconnect after a failure) first claims the sink:
//     HINCRBY <checkpoint_key> epoch 1, which makes any transaction a
//     predecessor still has in flight fail (each Deliver WATCHes the
//     checkpoint key and checks the epoch it claimed), then reads the
//     checkpoint back; events at or below it are never written again,
//     except the parked events an operator replays (Batch.Replay) and a
//     batch of another epoch than the checkpoint's (Batch.Epoch: after a
//     failover the new slot's ids can be lower), which is written whole
//     and moves the checkpoint, with its epoch, to its last id.
//   - A sink whose epoch was taken over never writes again: Deliver fails
//     with a fatal error.
//
// Filtering at or below the checkpoint is only sound when batches commit
// in id order, so the sink asks the host for ordered delivery
// (Info.Ordered).
package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/walcast/walcast/pluginkit"
)

func main() {
	log := pluginkit.NewLogger()
	redis.SetLogger(clientLog{log})
	pluginkit.ServeBatch(newSink(log))
}

// clientLog sends go-redis's own messages (a failed dial of its pool, say)
// to the sink's log at debug level: every failure that matters reaches
// walcast as a Deliver error already.
type clientLog struct{ log *slog.Logger }

func (l clientLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "client", "go-redis")
}
