package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/pluginkit/sinktest"
)

// consumer reads a queue bound to an exchange and keeps every body, in
// arrival order.
type consumer struct {
	ch    *amqp.Channel
	queue string

	mu   sync.Mutex
	msgs []amqp.Delivery
}

// consume declares the exchange (as the sink does) and a queue bound to it
// for every routing key, and reads it until the test ends.
func consume(t testing.TB, exchange string) *consumer {
	t.Helper()
	conn, err := amqp.Dial(rabbit.url())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	c := &consumer{ch: ch, queue: "q-" + strings.NewReplacer("/", "-").Replace(t.Name())}
	if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(c.queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(c.queue, "#", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume(c.queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for d := range deliveries {
			c.mu.Lock()
			c.msgs = append(c.msgs, d)
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *consumer) bodies() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([][]byte, len(c.msgs))
	for i, m := range c.msgs {
		out[i] = m.Body
	}
	return out
}

func (c *consumer) deliveries() []amqp.Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]amqp.Delivery(nil), c.msgs...)
}

func cfgJSON(t testing.TB, kv map[string]any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(kv)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConformance runs the conformance suite against a real broker, with
// a queue bound to the exchange as the destination. The broker is frozen
// for the hang, the queue unbound for the failing destination (every
// message returned: retried), and an event over max_message_bytes is
// refused alone.
func TestConformance(t *testing.T) {
	c := consume(t, "conformance")
	sinktest.Run(t, sinktest.Config{
		NewBatch: func() pluginkit.BatchSink { return New() },
		Config: cfgJSON(t, map[string]any{
			"url": rabbit.url(), "exchange": "conformance", "max_message_bytes": maxMessageSize,
		}),
		InvalidConfigs: []sinktest.InvalidConfig{
			{Name: "not an AMQP URL", Config: json.RawMessage(`{"url":"http://x"}`), Field: "url"},
			{Name: "unknown placeholder", Config: json.RawMessage(`{"url":"amqp://x/","routing_key":"{schema}.{tabel}"}`), Field: "routing_key"},
			{Name: "exchange type", Config: json.RawMessage(`{"url":"amqp://x/","exchange_type":"fan"}`), Field: "exchange_type"},
			{Name: "tls without amqps", Config: json.RawMessage(`{"url":"amqp://x/","tls":{"server_name":"x"}}`), Field: "tls"},
			{Name: "size", Config: json.RawMessage(`{"url":"amqp://x/","max_message_bytes":0}`), Field: "max_message_bytes"},
		},
		Received: c.bodies,
		Hang:     rabbit.freeze,
		Faults: []sinktest.Fault{{
			Name: "no queue bound",
			Inject: func() func() {
				if err := c.ch.QueueUnbind(c.queue, "#", "conformance", nil); err != nil {
					t.Fatal(err)
				}
				return func() {
					if err := c.ch.QueueBind(c.queue, "#", "conformance", false, nil); err != nil {
						t.Fatal(err)
					}
				}
			},
			Want: pluginkit.KindRetryable,
		}},
		EventFaults: []sinktest.EventFault{{
			Name: "larger than max_message_bytes",
			Spoil: func(ev pluginkit.Event) pluginkit.Event {
				ev.Payload = append(bytes.Repeat([]byte(" "), maxMessageSize), ev.Payload...)
				return ev
			},
			Want: pluginkit.KindPermanent,
		}},
	})
}

// TestMessageProperties: each message is persistent, carries the event id
// as message_id and in a header, the op as type, and goes to the routing
// key "<schema>.<table>".
func TestMessageProperties(t *testing.T) {
	c := consume(t, "props")
	s := open(t, map[string]any{"url": rabbit.url(), "exchange": "props"})
	ev := event("0/16B3748:2", "public", "orders", `{"id":"0/16B3748:2","op":"insert"}`)
	if _, err := s.Deliver(ctx(t), pluginkit.Batch{Events: []pluginkit.Event{ev}}); err != nil {
		t.Fatal(err)
	}
	d := waitDeliveries(t, c, 1)[0]
	if d.DeliveryMode != amqp.Persistent || d.MessageId != "0/16B3748:2" || d.Headers["walcast-id"] != "0/16B3748:2" ||
		d.RoutingKey != "public.orders" || d.Type != "insert" || d.ContentType != "application/json" || !bytes.Equal(d.Body, ev.Payload) {
		t.Errorf("message: mode %d id %q header %v key %q type %q content type %q body %s",
			d.DeliveryMode, d.MessageId, d.Headers["walcast-id"], d.RoutingKey, d.Type, d.ContentType, d.Body)
	}
	if d.Headers["walcast-table"] != "public.orders" || d.Headers["walcast-op"] != "insert" || d.AppId != "walcast" {
		t.Errorf("message: headers %v, app_id %q; want walcast-table public.orders, walcast-op insert, app_id walcast", d.Headers, d.AppId)
	}
	// A routing key pattern of the config.
	s2 := open(t, map[string]any{"url": rabbit.url(), "exchange": "props", "routing_key": "cdc.{op}.{table}.{schema}"})
	if _, err := s2.Deliver(ctx(t), pluginkit.Batch{Events: []pluginkit.Event{event("0/16B3749:0", "public", "orders", `{}`)}}); err != nil {
		t.Fatal(err)
	}
	if d := waitDeliveries(t, c, 2)[1]; d.RoutingKey != "cdc.insert.orders.public" {
		t.Errorf("routing_key = \"cdc.{op}.{table}.{schema}\" gave %q", d.RoutingKey)
	}
}

// TestLearnsBrokerLimit: with max_message_bytes above the broker's
// max_message_size, the broker closes the channel over the large message;
// the sink learns the limit from its answer and publishes the batch again
// without it, naming it as permanent. The events before it may arrive
// twice (at least once), the others once.
func TestLearnsBrokerLimit(t *testing.T) {
	c := consume(t, "limit")
	s := open(t, map[string]any{"url": rabbit.url(), "exchange": "limit"})
	var batch []pluginkit.Event
	for i := range 4 {
		body := fmt.Sprintf(`{"n":%d}`, i)
		if i == 2 {
			body = `{"pad":"` + strings.Repeat("x", 2*maxMessageSize) + `"}`
		}
		batch = append(batch, event(fmt.Sprintf("0/A%d:0", i), "public", "orders", body))
	}
	_, err := s.Deliver(ctx(t), pluginkit.Batch{Events: batch})
	var be *pluginkit.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 1 || be.Failed[2] == nil {
		t.Fatalf("Deliver = %v, want a BatchError naming event 2", err)
	}
	if k, _ := pluginkit.KindOf(be.Failed[2]); k != pluginkit.KindPermanent || !strings.Contains(be.Failed[2].Error(), fmt.Sprint(maxMessageSize)) {
		t.Errorf("event 2: %v (%s), want permanent naming the broker's limit", be.Failed[2], k)
	}
	got := map[string]int{}
	waitFor(t, "events 0, 1 and 3", func() bool {
		clear(got)
		for _, d := range c.deliveries() {
			got[d.MessageId]++
		}
		return got["0/A0:0"] > 0 && got["0/A1:0"] > 0 && got["0/A3:0"] > 0
	})
	if got["0/A2:0"] != 0 || got["0/A3:0"] != 1 {
		t.Errorf("arrived %v", got)
	}
}

// TestUnreachableAtStart: a broker that is not there when the sink opens
// does not fail Open; Deliver fails, retryable, naming the broker.
func TestUnreachableAtStart(t *testing.T) {
	ports, _ := freePorts(1)
	s := open(t, map[string]any{"url": fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", ports[0])})
	_, err := s.Deliver(ctx(t), pluginkit.Batch{Events: []pluginkit.Event{event("0/1:0", "public", "orders", `{}`)}})
	if k, _ := pluginkit.KindOf(err); err == nil || k != pluginkit.KindRetryable || !strings.Contains(err.Error(), "cannot be reached") {
		t.Fatalf("Deliver to no broker = %v (%s), want retryable naming the unreachable broker", err, k)
	}
}

// TestAuthRefused: wrong credentials fail Open (walcast stops at start
// with the cause) and name the user.
func TestAuthRefused(t *testing.T) {
	s := New()
	if err := s.Configure(ctx(t), pluginkit.Setup{Config: cfgJSON(t, map[string]any{"url": rabbit.url(), "password": "wrong"})}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Open(ctx(t))
	if k, _ := pluginkit.KindOf(err); err == nil || k != pluginkit.KindPermanent || !strings.Contains(err.Error(), `refused user "guest"`) {
		t.Fatalf("Open with a wrong password = %v (%s), want permanent naming the user", err, k)
	}
	s.Close(ctx(t))
}

func open(t testing.TB, cfg map[string]any) *Sink {
	t.Helper()
	s := New()
	if err := s.Configure(ctx(t), pluginkit.Setup{Config: cfgJSON(t, cfg)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func event(id, schema, table, body string) pluginkit.Event {
	return pluginkit.Event{ID: pluginkit.MustParseEventID(id), Schema: schema, Table: table, Op: pluginkit.OpInsert, Key: []byte(`{"id":1}`), Payload: []byte(body)}
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func waitDeliveries(t testing.TB, c *consumer, n int) []amqp.Delivery {
	t.Helper()
	var got []amqp.Delivery
	waitFor(t, fmt.Sprintf("%d messages", n), func() bool { got = c.deliveries(); return len(got) >= n })
	return got
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestExchangeRefused: an exchange the sink cannot use fails Open (walcast
// stops at start), naming it: one declared with another type, and a
// missing one with declare_exchange = false.
func TestExchangeRefused(t *testing.T) {
	// A direct exchange under the name the sink declares as topic.
	s := open(t, map[string]any{"url": rabbit.url(), "exchange": "other-type", "exchange_type": "direct"})
	s.Close(ctx(t))
	for _, c := range []struct {
		cfg  map[string]any
		want string
	}{
		{map[string]any{"url": rabbit.url(), "exchange": "other-type"}, `exchange "other-type" of another type than topic`},
		{map[string]any{"url": rabbit.url(), "exchange": "never-declared", "declare_exchange": false}, `exchange "never-declared" does not exist`},
	} {
		s := New()
		if err := s.Configure(ctx(t), pluginkit.Setup{Config: cfgJSON(t, c.cfg)}); err != nil {
			t.Fatal(err)
		}
		_, err := s.Open(ctx(t))
		if k, _ := pluginkit.KindOf(err); err == nil || k != pluginkit.KindPermanent || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open with %v = %v (%s), want permanent saying %s", c.cfg, err, k, c.want)
		}
		s.Close(ctx(t))
	}
}

// TestNackedRetried: a queue full under x-overflow = reject-publish makes
// the broker nack what is routed to it; those events fail alone,
// retryable, naming the nack, and the ones the broker took are delivered.
func TestNackedRetried(t *testing.T) {
	conn, err := amqp.Dial(rabbit.url())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("nack", "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	args := amqp.Table{"x-max-length": int32(2), "x-overflow": "reject-publish"}
	if _, err := ch.QueueDeclare("q-nack", true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("q-nack", "#", "nack", false, nil); err != nil {
		t.Fatal(err)
	}
	s := open(t, map[string]any{"url": rabbit.url(), "exchange": "nack"})
	var batch []pluginkit.Event
	for i := range 4 {
		batch = append(batch, event(fmt.Sprintf("0/B%d:0", i), "public", "orders", fmt.Sprintf(`{"n":%d}`, i)))
	}
	_, err = s.Deliver(ctx(t), pluginkit.Batch{Events: batch})
	var be *pluginkit.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 2 || be.Failed[2] == nil || be.Failed[3] == nil {
		t.Fatalf("Deliver into a queue with room for 2 = %v, want a BatchError naming events 2 and 3", err)
	}
	if k, _ := pluginkit.KindOf(be.Failed[2]); k != pluginkit.KindRetryable || !strings.Contains(be.Failed[2].Error(), "nacked") {
		t.Errorf("event 2: %v (%s), want retryable naming the nack", be.Failed[2], k)
	}
	q, err := ch.QueueDeclarePassive("q-nack", true, false, false, false, args)
	if err != nil || q.Messages != 2 {
		t.Fatalf("queue holds %d messages (%v), want the 2 it took", q.Messages, err)
	}
}

// TestRoutes: with a route, the route is the routing key: a queue bound
// to each of two keys gets exactly the events routed there, every row's
// changes in commit order, and a route too long for a routing key fails
// alone, as permanent, naming the route.
func TestRoutes(t *testing.T) {
	s := open(t, map[string]any{"url": rabbit.url(), "exchange": "routes", "mandatory": true})
	if !s.Info().Routes {
		t.Fatal("Info.Routes is false: the host would refuse a route on the rabbitmq sink")
	}
	keys := []string{"tenant.eu", "tenant.us"}
	queues := map[string]*consumer{}
	for _, k := range keys {
		queues[k] = consumeKey(t, "routes", k)
	}
	var evs []pluginkit.Event
	want := map[string][]string{}
	for i := range 60 {
		row := i % 7
		e := event(fmt.Sprintf("0/100:%d", i), "public", "items", fmt.Sprintf(`{"row":%d,"i":%d}`, row, i))
		e.Key = fmt.Appendf(nil, `{"id":%d}`, row)
		e.Route = keys[row%2]
		if i == 10 {
			e.Route = strings.Repeat("x", maxRoutingKey+1)
		} else {
			want[e.Route] = append(want[e.Route], string(e.Payload))
		}
		evs = append(evs, e)
	}
	_, err := s.Deliver(ctx(t), pluginkit.Batch{Events: evs})
	var be *pluginkit.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 1 || be.Failed[10] == nil || !strings.Contains(be.Failed[10].Error(), "route \"xxx") {
		t.Fatalf("Deliver with one overlong route = %v, want a BatchError naming event 10 and its route", err)
	}
	if kind, _ := pluginkit.KindOf(be.Failed[10]); kind != pluginkit.KindPermanent {
		t.Fatalf("the overlong route's error is %v, want permanent", kind)
	}
	for _, k := range keys {
		got := waitDeliveries(t, queues[k], len(want[k]))
		var bodies []string
		for _, d := range got {
			if d.RoutingKey != k {
				t.Fatalf("queue bound to %s got a message with routing key %q", k, d.RoutingKey)
			}
			bodies = append(bodies, string(d.Body))
		}
		if strings.Join(bodies, "\n") != strings.Join(want[k], "\n") {
			t.Errorf("queue bound to %s got\n%s\nwant\n%s", k, strings.Join(bodies, "\n"), strings.Join(want[k], "\n"))
		}
	}
}

// consumeKey is consume with a queue of its own bound to one routing key.
func consumeKey(t testing.TB, exchange, key string) *consumer {
	t.Helper()
	conn, err := amqp.Dial(rabbit.url())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	c := &consumer{ch: ch, queue: "q-" + strings.NewReplacer("/", "-").Replace(t.Name()) + "-" + key}
	if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(c.queue, false, true, true, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(c.queue, key, exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume(c.queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for d := range deliveries {
			c.mu.Lock()
			c.msgs = append(c.msgs, d)
			c.mu.Unlock()
		}
	}()
	return c
}
