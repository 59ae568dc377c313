package main

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walcast/walcast/pluginkit"
)

// An outbox event (one with headers) is one record: key = the aggregate
// id, value = the payload, walcast's headers then the event's in name
// order, and no tombstone even with tombstones on.
func TestOutboxEventRecord(t *testing.T) {
	s := &Sink{cfg: settings{tombstones: true}}
	e := pluginkit.Event{ID: pluginkit.EventID{CommitLSN: 0x100, Index: 2}, Schema: "public", Table: "outbox", Op: pluginkit.OpInsert,
		Key: []byte(`"o-1"`), Payload: []byte(`{"total":3}`), Route: "outbox.event.order",
		Headers: map[string]string{"type": "OrderCreated", "id": "6f1c"}}
	recs := s.eventRecords(nil, e.Route, &e)
	if len(recs) != 1 {
		t.Fatalf("%d records, want 1", len(recs))
	}
	r := recs[0]
	if r.Topic != "outbox.event.order" || string(r.Key) != `"o-1"` || string(r.Value) != `{"total":3}` {
		t.Fatalf("record topic %s key %s value %s", r.Topic, r.Key, r.Value)
	}
	want := []kgo.RecordHeader{{Key: "walcast-id", Value: []byte("0/100:2")}, {Key: "walcast-op", Value: []byte("insert")},
		{Key: "walcast-table", Value: []byte("public.outbox")}, {Key: "id", Value: []byte("6f1c")}, {Key: "type", Value: []byte("OrderCreated")}}
	if len(r.Headers) != len(want) {
		t.Fatalf("headers %v, want %v", r.Headers, want)
	}
	for i, h := range want {
		if r.Headers[i].Key != h.Key || string(r.Headers[i].Value) != string(h.Value) {
			t.Fatalf("header %d: %s=%s, want %s=%s", i, r.Headers[i].Key, r.Headers[i].Value, h.Key, h.Value)
		}
	}
}
