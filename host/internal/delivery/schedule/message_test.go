package schedule

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/host/internal/delivery/fanout"
	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/pluginkit"
)

// A message event concerns no table: a sink's tables filter lets it
// through, its ops filter decides.
func TestMessagesPassTheTablesFilter(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  map[pluginkit.Op]bool
		want []string
	}{
		{"every op", nil, []string{"0/100:0", "0/100:2"}},
		{"ops with message", map[pluginkit.Op]bool{pluginkit.OpMessage: true}, []string{"0/100:2"}},
		{"ops without message", map[pluginkit.Op]bool{pluginkit.OpInsert: true}, []string{"0/100:0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var got []string
			sink := &fakeSink{t: t, inFlight: map[string]bool{}, seen: func(b attempt.Batch) {
				mu.Lock()
				for _, e := range b.Events {
					got = append(got, e.ID.String())
				}
				mu.Unlock()
			}}
			tracker := ack.New([]ack.SinkSpec{{ID: "s"}}, 0)
			queue := fanout.NewQueue(100, false)
			s := New(Config{SinkID: "s", BatchSize: 1, Strict: true, Tables: map[string]bool{"public.t": true}, Ops: tc.ops}, queue, tracker, sink)
			for i, ev := range []pluginkit.Event{
				{Schema: "public", Table: "t", Op: pluginkit.OpInsert, Key: []byte(`{"id":1}`)},
				{Schema: "public", Table: "other", Op: pluginkit.OpInsert, Key: []byte(`{"id":1}`)},
				{Op: pluginkit.OpMessage, Key: []byte(`{"prefix":"app.x"}`)},
			} {
				ev.ID = pluginkit.EventID{CommitLSN: 0x100, Index: uint64(i)}
				ev.Payload = []byte(`{}`)
				seq, _ := tracker.Add(ev.ID)
				queue.C <- fanout.Item{Seq: seq, Event: ev}
			}
			tracker.Commit(0x108)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx, make(chan struct{})) }()
			deadline := time.Now().Add(time.Minute)
			for tracker.Pending(0) > 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
			<-done
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(got, tc.want) {
				t.Fatalf("delivered %v, want %v", got, tc.want)
			}
		})
	}
}
