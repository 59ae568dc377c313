package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walcast/walcast/pluginkit"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// broker starts an in-process kfake broker on a free 127.0.0.1 port.
func broker(t *testing.T, opts ...kfake.Opt) (*kfake.Cluster, string) {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.DefaultNumPartitions(3)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, c.ListenAddrs()[0]
}

// openSink configures and opens a sink; extra is merged into the config.
func openSink(t *testing.T, addr string, extra map[string]any) (*Sink, pluginkit.OpenResult) {
	t.Helper()
	s := newSink(discardLogger())
	cfg := map[string]any{"brokers": []string{addr}}
	for k, v := range extra {
		cfg[k] = v
	}
	raw, _ := json.Marshal(cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := s.Configure(ctx, pluginkit.Setup{Config: raw}); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	res, err := s.Open(ctx)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s, res
}

// events makes n events of public.items with ids 0/<lsn>:i, each row key
// {"id":i%rows}.
func events(lsn uint64, n int) []pluginkit.Event {
	out := make([]pluginkit.Event, n)
	for i := range out {
		id := pluginkit.EventID{CommitLSN: lsn, Index: uint64(i)}
		key := fmt.Sprintf(`{"id":%d}`, i%7)
		out[i] = pluginkit.Event{
			ID: id, Schema: "public", Table: "items", Op: pluginkit.OpUpdate, Key: []byte(key),
			Payload: fmt.Appendf(nil, `{"id":%q,"key":%s}`, id, key),
		}
	}
	return out
}

func deliver(t *testing.T, s *Sink, evs []pluginkit.Event) pluginkit.DeliverResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := s.Deliver(ctx, pluginkit.Batch{Events: evs})
	if err != nil {
		t.Fatalf("Deliver %s..%s: %v", evs[0].ID, evs[len(evs)-1].ID, err)
	}
	return res
}

// read returns the walcast-id header of every record of topic a reader
// with the given isolation level (and client options) sees.
func read(t *testing.T, addr, topic string, iso kgo.IsolationLevel, opts ...kgo.Opt) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	opts = append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var ids []string
	err = readToEnd(ctx, kadm.NewClient(cl), opts, topic, iso, func(r *kgo.Record) {
		ids = append(ids, header(r, "walcast-id"))
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func assertOnce(t *testing.T, got []string, want []pluginkit.Event) {
	t.Helper()
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
	}
	for _, e := range want {
		if n := seen[e.ID.String()]; n != 1 {
			t.Errorf("event %s seen %d times, want once", e.ID, n)
		}
	}
	if len(got) != len(want) {
		t.Errorf("saw %d records, want %d", len(got), len(want))
	}
}

func TestConfigure(t *testing.T) {
	tests := []struct {
		name  string
		cfg   string
		field string // empty: valid
	}{
		{name: "minimal", cfg: `{"brokers":["127.0.0.1:9092"]}`},
		{name: "full", cfg: `{"brokers":["k1:9092","k2:9092"],"topic_prefix":"cdc","eos":true,"transactional_id":"walcast-orders",
			"checkpoint_topic":"cdc.checkpoints","transaction_timeout":"90s","max_message_bytes":4000000,"client_id":"w","compression":"zstd",
			"create_topics":{"partitions":"6","replication_factor":"3"},"tls":{"insecure_skip_verify":"true","server_name":"kafka"},
			"sasl":{"mechanism":"scram-sha-512","username":"u","password":"p"}}`},
		{name: "at least once", cfg: `{"brokers":["k:9092"],"eos":false}`},
		{name: "no brokers", cfg: `{}`, field: "brokers"},
		{name: "broker without port", cfg: `{"brokers":["kafka"]}`, field: "brokers"},
		{name: "bad prefix", cfg: `{"brokers":["k:9092"],"topic_prefix":"a b"}`, field: "topic_prefix"},
		{name: "bad checkpoint topic", cfg: `{"brokers":["k:9092"],"checkpoint_topic":"x/y"}`, field: "checkpoint_topic"},
		{name: "transactional id without eos", cfg: `{"brokers":["k:9092"],"eos":false,"transactional_id":"t"}`, field: "transactional_id"},
		{name: "short transaction timeout", cfg: `{"brokers":["k:9092"],"transaction_timeout":"10ms"}`, field: "transaction_timeout"},
		{name: "tiny max message", cfg: `{"brokers":["k:9092"],"max_message_bytes":10}`, field: "max_message_bytes"},
		{name: "fractional max message", cfg: `{"brokers":["k:9092"],"max_message_bytes":1.5}`, field: "max_message_bytes"},
		{name: "bad compression", cfg: `{"brokers":["k:9092"],"compression":"brotli"}`, field: "compression"},
		{name: "bad partitions", cfg: `{"brokers":["k:9092"],"create_topics":{"partitions":"0"}}`, field: "create_topics"},
		{name: "unknown create key", cfg: `{"brokers":["k:9092"],"create_topics":{"compacted":"true"}}`, field: "create_topics"},
		{name: "missing ca file", cfg: `{"brokers":["k:9092"],"tls":{"ca_file":"/nonexistent/ca.pem"}}`, field: "tls"},
		{name: "cert without key", cfg: `{"brokers":["k:9092"],"tls":{"cert_file":"c.pem"}}`, field: "tls"},
		{name: "bad sasl mechanism", cfg: `{"brokers":["k:9092"],"sasl":{"mechanism":"gssapi","username":"u"}}`, field: "sasl"},
		{name: "sasl without user", cfg: `{"brokers":["k:9092"],"sasl":{"mechanism":"plain"}}`, field: "sasl"},
		{name: "wrong type", cfg: `{"brokers":"k:9092"}`, field: "brokers"},
		{name: "cloudevents binary", cfg: `{"brokers":["k:9092"],"cloudevents_mode":"binary"}`},
		{name: "bad cloudevents mode", cfg: `{"brokers":["k:9092"],"cloudevents_mode":"batch"}`, field: "cloudevents_mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := newSink(discardLogger()).Configure(t.Context(), pluginkit.Setup{Config: json.RawMessage(tt.cfg)})
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Configure: %v", err)
				}
				return
			}
			var ce *pluginkit.ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.field {
				t.Fatalf("Configure = %v, want a ConfigError for %q", err, tt.field)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	st, err := decodeConfig(json.RawMessage(`{"brokers":["k:9092"]}`), pluginkit.Identity{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !st.eos || st.topicPrefix != "walcast" || st.txnID != "walcast-walcast" || st.checkpointTopic != "walcast.checkpoints" || !st.create {
		t.Errorf("defaults = %+v", st)
	}
	if !newSink(discardLogger()).Info().Ordered {
		t.Error("Info().Ordered = false; checkpoint filtering needs ordered delivery")
	}
}

// TestExactlyOnceAcrossReopen: a reopened sink reports the last committed
// id, and a redelivered batch (the host crashed between the commit and
// recording the ack) is filtered and counted, in part or in whole.
func TestExactlyOnceAcrossReopen(t *testing.T) {
	_, addr := broker(t)
	s, res := openSink(t, addr, map[string]any{"transactional_id": "walcast-t1"})
	if !res.Checkpoint.IsZero() {
		t.Fatalf("fresh Open checkpoint = %s, want zero", res.Checkpoint)
	}
	a, b := events(0x100, 50), events(0x200, 30)
	if r := deliver(t, s, a); r.Duplicates != 0 {
		t.Errorf("first delivery: %d duplicates", r.Duplicates)
	}
	if r := deliver(t, s, b); r.Duplicates != 0 {
		t.Errorf("second delivery: %d duplicates", r.Duplicates)
	}
	s.Close(t.Context())

	s2, res := openSink(t, addr, map[string]any{"transactional_id": "walcast-t1"})
	if want := b[len(b)-1].ID; res.Checkpoint != want {
		t.Fatalf("reopened checkpoint = %s, want %s", res.Checkpoint, want)
	}
	// The host hands over the tail of b again plus new events.
	c := events(0x300, 20)
	again := append(append([]pluginkit.Event{}, b[10:]...), c...)
	if r := deliver(t, s2, again); r.Duplicates != 20 {
		t.Errorf("redelivery: %d duplicates, want 20", r.Duplicates)
	}
	if r := deliver(t, s2, b); r.Duplicates != len(b) {
		t.Errorf("full redelivery: %d duplicates, want %d", r.Duplicates, len(b))
	}
	all := append(append(append([]pluginkit.Event{}, a...), b...), c...)
	assertOnce(t, read(t, addr, "walcast.public.items", kgo.ReadCommitted()), all)

	// Another transactional id has a checkpoint of its own.
	_, res = openSink(t, addr, map[string]any{"transactional_id": "walcast-other"})
	if !res.Checkpoint.IsZero() {
		t.Errorf("other sink's checkpoint = %s, want zero", res.Checkpoint)
	}
}

// TestRecordsCarryKeyAndHeaders checks the record layout a consumer relies
// on, and that a row's records share a partition.
func TestRecordsCarryKeyAndHeaders(t *testing.T) {
	_, addr := broker(t)
	s, _ := openSink(t, addr, map[string]any{"topic_prefix": "cdc", "transactional_id": "walcast-layout"})
	evs := events(0x10, 40)
	deliver(t, s, evs)

	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	byID := map[string]pluginkit.Event{}
	for _, e := range evs {
		byID[e.ID.String()] = e
	}
	partOf := map[string]int32{}
	lastOf := map[string]pluginkit.EventID{}
	n := 0
	err = readToEnd(t.Context(), kadm.NewClient(cl), []kgo.Opt{kgo.SeedBrokers(addr)}, "cdc.public.items", kgo.ReadCommitted(), func(r *kgo.Record) {
		n++
		e, ok := byID[header(r, "walcast-id")]
		if !ok {
			t.Fatalf("record with headers %v is not an event of the batch", r.Headers)
		}
		if string(r.Key) != string(e.Key) || string(r.Value) != string(e.Payload) {
			t.Errorf("event %s: key %s value %s, want %s %s", e.ID, r.Key, r.Value, e.Key, e.Payload)
		}
		if header(r, "walcast-op") != "update" || header(r, "walcast-table") != "public.items" {
			t.Errorf("event %s headers = %v", e.ID, r.Headers)
		}
		key := string(r.Key)
		if p, ok := partOf[key]; ok && p != r.Partition {
			t.Errorf("key %s in partitions %d and %d", key, p, r.Partition)
		}
		partOf[key] = r.Partition
		if prev, ok := lastOf[key]; ok && e.ID.Compare(prev) <= 0 {
			t.Errorf("key %s: %s after %s", key, e.ID, prev)
		}
		lastOf[key] = e.ID
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != len(evs) {
		t.Fatalf("read %d records, want %d", n, len(evs))
	}
}

// TestZombieIsFenced: a second producer with the same transactional id
// starts while the first is between producing its batch and committing it
// (a paused process, a partitioned network). The first can never commit
// afterwards, and nothing it produced becomes visible.
func TestZombieIsFenced(t *testing.T) {
	_, addr := broker(t)
	cfg := map[string]any{"transactional_id": "walcast-zombie"}
	zombie, _ := openSink(t, addr, cfg)
	deliver(t, zombie, events(0x100, 5))

	var successor *Sink
	zombie.beforeCommit = func(context.Context) error {
		// The zombie has produced its batch; now its successor starts.
		successor, _ = openSink(t, addr, cfg)
		return nil
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := zombie.Deliver(ctx, pluginkit.Batch{Events: events(0x200, 5)})
	if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindFatal || !strings.Contains(err.Error(), "fenced") {
		t.Fatalf("zombie commit: %v (kind %v), want a fatal fenced error", err, kind)
	}
	zombie.beforeCommit = nil
	_, err = zombie.Deliver(ctx, pluginkit.Batch{Events: events(0x300, 5)})
	if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindFatal {
		t.Fatalf("zombie after fencing: %v, want a fatal error", err)
	}

	// The successor took over at the zombie's last commit and goes on.
	if got := successor.checkpoint.ID; got != (pluginkit.EventID{CommitLSN: 0x100, Index: 4}) {
		t.Errorf("successor checkpoint = %s, want 0/100:4", got)
	}
	if r := deliver(t, successor, events(0x200, 5)); r.Duplicates != 0 {
		t.Errorf("successor: %d duplicates", r.Duplicates)
	}
	want := append(events(0x100, 5), events(0x200, 5)...)
	assertOnce(t, read(t, addr, "walcast.public.items", kgo.ReadCommitted()), want)
}

// TestReadUncommittedSeesAbortedData documents why consumers must read with
// isolation.level=read_committed: the records of a transaction that was
// aborted (a failed Deliver, a crash before the commit) stay in the log, and
// a read_uncommitted reader gets them — a duplicate once the batch is
// delivered again, or a change that was never acknowledged at all.
func TestReadUncommittedSeesAbortedData(t *testing.T) {
	_, addr := broker(t)
	s, _ := openSink(t, addr, map[string]any{"transactional_id": "walcast-abort"})
	batch := events(0x100, 10)
	s.beforeCommit = func(context.Context) error { return errors.New("injected failure before commit") }
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := s.Deliver(ctx, pluginkit.Batch{Events: batch}); err == nil {
		t.Fatal("Deliver succeeded despite the injected failure")
	} else if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindRetryable {
		t.Fatalf("failed Deliver is %v, want retryable: %v", kind, err)
	}
	s.beforeCommit = nil
	if r := deliver(t, s, batch); r.Duplicates != 0 {
		t.Errorf("retry: %d duplicates", r.Duplicates)
	}

	committed := read(t, addr, "walcast.public.items", kgo.ReadCommitted())
	assertOnce(t, committed, batch)
	uncommitted := read(t, addr, "walcast.public.items", kgo.ReadUncommitted())
	if len(uncommitted) != 2*len(batch) {
		t.Fatalf("read_uncommitted saw %d records, want %d (the aborted attempt and the committed one)", len(uncommitted), 2*len(batch))
	}
	t.Logf("read_committed: %d records; read_uncommitted: %d records (%d from the aborted transaction)",
		len(committed), len(uncommitted), len(uncommitted)-len(committed))
}

// TestAtLeastOnceWithoutEOS: eos = false produces idempotently but without
// transactions, so a redelivered batch lands twice and Open has no
// checkpoint to report.
func TestAtLeastOnceWithoutEOS(t *testing.T) {
	_, addr := broker(t)
	s, res := openSink(t, addr, map[string]any{"eos": false})
	if !res.Checkpoint.IsZero() {
		t.Errorf("Open checkpoint = %s, want zero", res.Checkpoint)
	}
	batch := events(0x100, 10)
	deliver(t, s, batch)
	if r := deliver(t, s, batch); r.Duplicates != 0 {
		t.Errorf("eos=false reported %d duplicates; it cannot know", r.Duplicates)
	}
	if got := read(t, addr, "walcast.public.items", kgo.ReadCommitted()); len(got) != 2*len(batch) {
		t.Errorf("saw %d records, want %d", len(got), 2*len(batch))
	}
}

func TestUnreachableBroker(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	s := newSink(discardLogger())
	if err := s.Configure(t.Context(), pluginkit.Setup{Config: json.RawMessage(`{"brokers":["` + addr + `"]}`)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err = s.Open(ctx)
	if kind, _ := pluginkit.KindOf(err); err == nil || kind != pluginkit.KindRetryable || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("Open = %v, want a retryable error saying the brokers are unreachable", err)
	}
	t.Log(err)
}

func TestRecordTooLargeIsPermanent(t *testing.T) {
	_, addr := broker(t)
	s, _ := openSink(t, addr, map[string]any{"transactional_id": "walcast-big", "max_message_bytes": 2048})
	big := events(0x100, 1)
	big[0].Payload = []byte(`{"pad":"` + strings.Repeat("x", 4096) + `"}`)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := s.Deliver(ctx, pluginkit.Batch{Events: big})
	if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindPermanent || !strings.Contains(err.Error(), "too large") || !strings.Contains(err.Error(), "0/100:0") {
		t.Fatalf("Deliver = %v, want a permanent error naming the event and the limit", err)
	}
	t.Log(err)
	// The sink recovers for the next batch, and nothing of the failed one
	// is visible.
	ok := events(0x200, 3)
	deliver(t, s, ok)
	assertOnce(t, read(t, addr, "walcast.public.items", kgo.ReadCommitted()), ok)
}

func TestTopicAuthorizationFailure(t *testing.T) {
	c, addr := broker(t)
	c.ControlKey(int16(kmsg.CreateTopics), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		creq := req.(*kmsg.CreateTopicsRequest)
		resp := creq.ResponseKind().(*kmsg.CreateTopicsResponse)
		for _, rt := range creq.Topics {
			st := kmsg.NewCreateTopicsResponseTopic()
			st.Topic = rt.Topic
			st.ErrorCode = kerr.TopicAuthorizationFailed.Code
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	s := newSink(discardLogger())
	if err := s.Configure(t.Context(), pluginkit.Setup{Config: json.RawMessage(`{"brokers":["` + addr + `"]}`)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := s.Open(ctx)
	if kind, _ := pluginkit.KindOf(err); err == nil || kind != pluginkit.KindRetryable || !strings.Contains(err.Error(), "not authorized") {
		t.Fatalf("Open = %v, want a retryable 'not authorized' error", err)
	}
	t.Log(err)
}

func TestTransactionalIDDefaultsToSinkID(t *testing.T) {
	st, err := decodeConfig(json.RawMessage(`{"brokers":["k:9092"]}`), pluginkit.Identity{Pipeline: "shop", SinkID: "events"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.txnID != "walcast-events" {
		t.Fatalf("transactional id %q, want walcast-events (the host-given sink id)", st.txnID)
	}
}

// A replayed batch (parked events, so below the checkpoint) is written, in
// a transaction whose checkpoint record repeats the checkpoint instead of
// moving it back; outside a replay the same events are duplicates.
func TestReplayBelowCheckpointIsWritten(t *testing.T) {
	_, addr := broker(t)
	s, _ := openSink(t, addr, map[string]any{"transactional_id": "walcast-replay"})
	parked, later := events(0x100, 2), events(0x200, 5)
	deliver(t, s, later)
	if r := deliver(t, s, parked); r.Duplicates != len(parked) {
		t.Fatalf("events below the checkpoint outside a replay: %d duplicates, want %d", r.Duplicates, len(parked))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := s.Deliver(ctx, pluginkit.Batch{Events: parked, Replay: true})
	if err != nil || res.Duplicates != 0 {
		t.Fatalf("replay: %+v, %v; want it written", res, err)
	}
	assertOnce(t, read(t, addr, "walcast.public.items", kgo.ReadCommitted()), append(append([]pluginkit.Event{}, later...), parked...))
	s.Close(t.Context())
	_, open := openSink(t, addr, map[string]any{"transactional_id": "walcast-replay"})
	if want := later[len(later)-1].ID; open.Checkpoint != want {
		t.Fatalf("checkpoint after the replay = %s, want %s (it must never move back)", open.Checkpoint, want)
	}
}

// deliverIn delivers evs as a batch of epoch.
func deliverIn(t *testing.T, s *Sink, epoch string, evs []pluginkit.Event) pluginkit.DeliverResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := s.Deliver(ctx, pluginkit.Batch{Events: evs, Epoch: epoch})
	if err != nil {
		t.Fatalf("Deliver %s..%s (epoch %q): %v", evs[0].ID, evs[len(evs)-1].ID, epoch, err)
	}
	return res
}

// TestNewEpochIsWrittenBelowCheckpoint: after a failover the new
// primary's ids can be lower than the checkpoint (pluginkit.Batch.Epoch).
// A batch of a new epoch is written whole and moves the checkpoint down,
// with its epoch, durably: a reopened sink reports both, skips a
// redelivery of that batch, and a checkpoint record without an epoch (an
// older sink's) filters as before, adopting the first epoch it meets.
func TestNewEpochIsWrittenBelowCheckpoint(t *testing.T) {
	_, addr := broker(t)
	s, _ := openSink(t, addr, nil)
	deliver(t, s, events(0x300, 5)) // a checkpoint of no epoch, as an older sink wrote it
	if r := deliverIn(t, s, "A", events(0x200, 5)); r.Duplicates != 5 {
		t.Fatalf("epoch A after a checkpoint without one: %d duplicates, want 5 (it is adopted, not distrusted)", r.Duplicates)
	}
	deliverIn(t, s, "A", events(0x400, 5))
	s.Close(t.Context())

	// The failover: epoch B's ids are lower than A's checkpoint.
	s, res := openSink(t, addr, nil)
	if res.Epoch != "A" || res.Checkpoint != (pluginkit.EventID{CommitLSN: 0x400, Index: 4}) {
		t.Fatalf("Open reported %s of epoch %q, want 0/400:4 of epoch A", res.Checkpoint, res.Epoch)
	}
	if r := deliverIn(t, s, "B", events(0x100, 5)); r.Duplicates != 0 {
		t.Fatalf("the first batch of epoch B, below A's checkpoint: %d duplicates, want none", r.Duplicates)
	}
	s.Close(t.Context())

	s, res = openSink(t, addr, nil)
	if res.Epoch != "B" || res.Checkpoint != (pluginkit.EventID{CommitLSN: 0x100, Index: 4}) {
		t.Fatalf("Open after epoch B's first batch reported %s of epoch %q, want 0/100:4 of epoch B", res.Checkpoint, res.Epoch)
	}
	if r := deliverIn(t, s, "B", events(0x100, 5)); r.Duplicates != 5 {
		t.Fatalf("epoch B's first batch again: %d duplicates, want 5", r.Duplicates)
	}
	if r := deliver(t, s, events(0x100, 5)); r.Duplicates != 5 {
		t.Fatalf("the same batch from a host without epochs: %d duplicates, want 5", r.Duplicates)
	}
	// A parked event of epoch A, replayed now: its id is above B's
	// checkpoint, which must not move (B's next events would be skipped).
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := s.Deliver(ctx, pluginkit.Batch{Events: events(0x380, 1), Replay: true}); err != nil {
		t.Fatalf("replay: %v", err)
	}
	if r := deliverIn(t, s, "B", events(0x180, 5)); r.Duplicates != 0 {
		t.Fatalf("epoch B's next batch after a replay of a higher id: %d duplicates, want none", r.Duplicates)
	}
	want := append(append(append(append(events(0x300, 5), events(0x400, 5)...), events(0x100, 5)...), events(0x380, 1)...), events(0x180, 5)...)
	assertOnce(t, read(t, addr, "walcast.public.items", kgo.ReadCommitted()), want)
}
