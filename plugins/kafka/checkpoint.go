package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/plugins/internal/epochs"
)

// epochHeader is the header of a checkpoint record that holds the epoch
// (pluginkit.Batch.Epoch) of the batch that wrote it. A header, so that
// the record's value stays the event id an older sink reads.
const epochHeader = "walcast-epoch"

// checkpoint is the last event id this sink wrote and the epoch of the
// batch that wrote it; epochs.Checkpoint says what it covers.
type checkpoint = epochs.Checkpoint

// readCheckpoint reads the checkpoint topic to its end as a read_committed
// reader and returns the last checkpoint committed under st.txnID (zero
// when there is none).
//
// Per partition the later record wins; across partitions (only if someone
// repartitioned the topic) the highest id.
func readCheckpoint(ctx context.Context, st settings, adm *kadm.Client) (checkpoint, error) {
	latest := map[int32]checkpoint{}
	var bad error
	err := readToEnd(ctx, adm, st.clientOpts(), st.checkpointTopic, kgo.ReadCommitted(), func(r *kgo.Record) {
		if string(r.Key) != st.txnID || bad != nil {
			return
		}
		id, err := pluginkit.ParseEventID(string(r.Value))
		if err != nil {
			bad = pluginkit.Permanent(fmt.Errorf("record at partition %d offset %d under key %q: %w", r.Partition, r.Offset, st.txnID, err))
			return
		}
		latest[r.Partition] = checkpoint{ID: id, Epoch: header(r, epochHeader)}
	})
	if err != nil {
		return checkpoint{}, err
	}
	if bad != nil {
		return checkpoint{}, bad
	}
	var cp checkpoint
	for _, c := range latest {
		if c.ID.Compare(cp.ID) > 0 {
			cp = c
		}
	}
	return cp, nil
}

// readToEnd calls fn, in offset order per partition, for every data record
// of topic that a reader with the given isolation level sees, from the
// start of every partition to "the end".
//
// The end is the high watermark when the call starts. A read_committed
// reader only gets as far as the last stable offset, which sits below any
// transaction still open, so with read_committed the loop may wait for
// other producers' open transactions on the topic to finish (at most their
// transaction timeout) — but it never misses a commit that happened before
// the call. Control records (commit and abort markers) are fetched too, so
// that progress is visible even when a partition ends with one; fn does
// not see them.
func readToEnd(ctx context.Context, adm *kadm.Client, opts []kgo.Opt, topic string, iso kgo.IsolationLevel, fn func(*kgo.Record)) error {
	ends, err := listEnds(ctx, adm, topic)
	if err != nil {
		return err
	}
	targets := map[int32]int64{}
	starts := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			targets[o.Partition] = o.Offset
			starts[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(targets) == 0 {
		return nil
	}

	cl, err := kgo.NewClient(append(opts,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: starts}),
		kgo.FetchIsolationLevel(iso),
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return fmt.Errorf("create reader of %s: %w", topic, err)
	}
	defer cl.Close()

	for len(targets) > 0 {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("read %s to offsets %v: %w", topic, targets, ctx.Err())
		}
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return fmt.Errorf("read %s: %w", topic, ferr)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if t, ok := targets[r.Partition]; ok && r.Offset+1 >= t {
				delete(targets, r.Partition)
			}
			if !r.Attrs.IsControl() {
				fn(r)
			}
		})
	}
	return nil
}

// listEnds lists the high watermarks of topic. A topic created a moment
// ago may not be in every broker's (or the client's) metadata yet, so
// "unknown topic" is retried for a short while.
func listEnds(ctx context.Context, adm *kadm.Client, topic string) (kadm.ListedOffsets, error) {
	const settle = 10 * time.Second
	deadline := time.Now().Add(settle)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		if err == nil {
			return ends, nil
		}
		if !errors.Is(err, kerr.UnknownTopicOrPartition) || time.Now().After(deadline) {
			return nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("list end offsets of %s: %w (last error: %w)", topic, ctx.Err(), err)
		case <-t.C:
		}
	}
}
