package schedule

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/host/internal/delivery/fanout"
	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/pluginkit"
)

// discardSink takes every batch at once: what is left to measure is the
// scheduler's own work per event.
type discardSink struct{ events atomic.Int64 }

func (d *discardSink) Deliver(_ context.Context, b attempt.Batch) (attempt.Result, error) {
	d.events.Add(int64(len(b.Events)))
	return attempt.Result{}, nil
}

// BenchmarkScheduler is one sink's scheduler on the daemon → stdout
// benchmark's shape: 100-event transactions of distinct rows through the
// ack tracker and the sink's queue, batches of 1000, 8 lanes, a sink that
// takes each batch at once. One op is one event; B/op and allocs/op are
// the figures to compare, ns/op moves with the machine's load:
//
//	go test -run '^$' -bench Scheduler -benchmem ./host/internal/delivery/schedule
func BenchmarkScheduler(b *testing.B) {
	tracker := ack.New([]ack.SinkSpec{{ID: "s", Durable: true}}, 0)
	queue := fanout.NewQueue(2000, true)
	sink := &discardSink{}
	s := New(Config{SinkID: "s", BatchSize: 1000, MaxInFlight: 8}, queue, tracker, sink)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	stop := make(chan struct{})
	go func() { done <- s.Run(ctx, stop) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()

	// The events exist before the clock starts, as the decoder's output
	// does before the scheduler sees it.
	events := make([]pluginkit.Event, b.N)
	for i := range events {
		events[i] = pluginkit.Event{ID: pluginkit.EventID{CommitLSN: 0x1000 + uint64(i/100)*0x100, Index: uint64(i % 100)},
			Schema: "public", Table: "bench", Op: pluginkit.OpInsert,
			Key: fmt.Appendf(nil, `{"id":%d}`, i), Payload: fmt.Appendf(nil, `{"id":%d,"payload":"x"}`, i)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i, ev := range events {
		seq, err := tracker.Add(ev.ID)
		if err != nil {
			b.Fatal(err)
		}
		queue.C <- fanout.Item{Seq: seq, Event: ev}
		if i%100 == 99 || i == len(events)-1 {
			tracker.Commit(ev.ID.CommitLSN + 8)
		}
	}
	for tracker.Pending(0) > 0 {
		// Spinning, not sleeping: the last batch lands within
		// microseconds and a sleep would be most of a small b.N.
		runtime.Gosched()
	}
	b.StopTimer()
	if got := sink.events.Load(); got != int64(b.N) {
		b.Fatalf("the sink got %d of %d events", got, b.N)
	}
}
