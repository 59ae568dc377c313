package bench

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaReader is the latency curve's Kafka consumer: a read_committed
// franz-go client on the bench table's topic that records each record's
// commit time (from its envelope) and its arrival, so that a change counts
// as arrived only once the sink's Kafka transaction committed.
type kafkaReader struct {
	cl     *kgo.Client
	events atomic.Int64
	mu     sync.Mutex
	commit []time.Time
	lat    []time.Duration
	done   chan struct{}
}

// benchTopic is the kafka sink's topic for public.bench (topic_prefix
// "walcast", docs/sinks.md).
const benchTopic = "walcast.public.bench"

func startKafkaReader(addr string) (*kafkaReader, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(addr),
		kgo.ConsumeTopics(benchTopic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		// The topic appears when the sink creates it: look again soon.
		kgo.MetadataMinAge(100*time.Millisecond),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	if err != nil {
		return nil, err
	}
	k := &kafkaReader{cl: cl, done: make(chan struct{})}
	go k.run()
	return k, nil
}

func (k *kafkaReader) run() {
	defer close(k.done)
	var env struct {
		CommitTime time.Time `json:"commit_time"`
	}
	for {
		fs := k.cl.PollFetches(context.Background())
		if fs.IsClientClosed() {
			return
		}
		now := time.Now()
		k.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			if r.Value == nil || json.Unmarshal(r.Value, &env) != nil {
				return // a tombstone; the latency workload only inserts
			}
			k.commit = append(k.commit, env.CommitTime)
			k.lat = append(k.lat, now.Sub(env.CommitTime))
			k.events.Add(1)
		})
		k.mu.Unlock()
	}
}

func (k *kafkaReader) count() int64 { return k.events.Load() }

func (k *kafkaReader) arrived() ([]time.Time, []time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.commit), slices.Clone(k.lat)
}

func (k *kafkaReader) close() {
	k.cl.Close()
	<-k.done
}
