package wire

import (
	"bytes"
	"reflect"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/walcast/walcast/pluginkit/cdc"
	sinkv1 "github.com/walcast/walcast/proto/sink/v1"
)

func toProto(events []cdc.Event, gap, replay bool, epoch string) *sinkv1.DeliverRequest {
	req := &sinkv1.DeliverRequest{GapBefore: gap, Replay: replay, Epoch: epoch}
	for _, e := range events {
		req.Events = append(req.Events, &sinkv1.Event{Id: e.ID.String(), Schema: e.Schema, Table: e.Table, Op: string(e.Op), Key: e.Key, Payload: e.Payload, Route: e.Route, Headers: e.Headers})
	}
	return req
}

func sampleBatch() []cdc.Event {
	return []cdc.Event{
		{ID: cdc.EventID{CommitLSN: 0x1A2B3C8, Index: 0}, Schema: "public", Table: "orders", Op: cdc.OpInsert, Key: []byte(`{"id":1}`), Payload: []byte(`{"id":"0/1A2B3C8:0"}`)},
		{ID: cdc.EventID{CommitLSN: 0x1A2B3C8, Index: 1}, Schema: "public", Table: "orders", Op: cdc.OpUpdate, Key: []byte(`{"id":2}`), Payload: bytes.Repeat([]byte("x"), 300), Route: "orders.eu"},
		{ID: cdc.EventID{CommitLSN: 0xFFFFFFFF_FFFFFFFF, Index: 1<<64 - 1}, Schema: "s", Table: "t", Op: cdc.OpTruncate, Key: []byte("null"), Payload: []byte("{}")},
		{ID: cdc.EventID{}, Schema: "", Table: "", Op: cdc.OpDelete}, // empty fields are left out, as proto3 does
		// An outbox event: headers after the route, in key order; an empty
		// value is an entry without its value field.
		{ID: cdc.EventID{CommitLSN: 0x1A2B3C8, Index: 2}, Schema: "public", Table: "outbox", Op: cdc.OpInsert, Key: []byte(`"order-1"`), Payload: []byte(`{"total":3}`),
			Route: "outbox.event.order", Headers: map[string]string{"type": "OrderCreated", "id": "7", "empty": ""}},
	}
}

// The host's encoding is byte for byte what the generated code produces,
// and the plugin's decoding reads what the generated code writes.
func TestDeliverWireMatchesGeneratedCode(t *testing.T) {
	events := sampleBatch()
	for i := range 8 {
		gap, replay, epoch := i&1 != 0, i&2 != 0, ""
		if i&4 != 0 {
			epoch = "7449999999999999999:0/1A2B3C8@1764675000123456"
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(toProto(events, gap, replay, epoch))
		if err != nil {
			t.Fatal(err)
		}
		b := DeliverBatch{Events: events, GapBefore: gap, Replay: replay, Epoch: epoch}
		got := b.AppendWire(nil)
		if !bytes.Equal(got, want) {
			t.Fatalf("gap %v, replay %v: encoding differs from the generated code:\n got %x\nwant %x", gap, replay, got, want)
		}
		if n := b.Size(); n != len(want) {
			t.Fatalf("Size() = %d, encoded %d", n, len(want))
		}
		req, err := decodeDeliverRequest(want)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(req.Events, events) || req.GapBefore != gap || req.Replay != replay || req.Epoch != epoch {
			t.Fatalf("decoded %+v (gap %v, replay %v, epoch %q)\nwant %+v (gap %v, replay %v, epoch %q)", req.Events, req.GapBefore, req.Replay, req.Epoch, events, gap, replay, epoch)
		}
	}
	back, _ := decodeDeliverRequest(DeliverBatch{Events: events}.AppendWire(nil))
	// A sink appending to one event's payload must not overwrite the next.
	_ = append(back.Events[0].Payload, "XXXXXXXX"...)
	if !bytes.Equal(back.Events[1].Key, events[1].Key) {
		t.Fatal("appending to a payload overwrote the next event's key")
	}
}

// Through the codec, as gRPC calls it on each side.
func TestDeliverCodec(t *testing.T) {
	events := sampleBatch()
	bs, err := codec{}.Marshal(DeliverBatch{Events: events, GapBefore: true, Replay: true, Epoch: "e1"})
	if err != nil {
		t.Fatal(err)
	}
	var generated sinkv1.DeliverRequest
	if err := proto.Unmarshal(bs.Materialize(), &generated); err != nil || !proto.Equal(&generated, toProto(events, true, true, "e1")) {
		t.Fatalf("generated code reads back %v (%v)", &generated, err)
	}
	var req DeliverRequest
	if err := (codec{}).Unmarshal(bs, &req); err != nil {
		t.Fatal(err)
	}
	bs.Free()
	if len(req.Events) != len(events) || !req.GapBefore || !req.Replay || req.Epoch != "e1" || req.Events[1].ID != events[1].ID || string(req.Events[1].Payload) != string(events[1].Payload) {
		t.Fatalf("codec round trip: %+v", req.Events)
	}
	bad := mem.BufferSlice{mem.SliceBuffer([]byte{0x0a, 0x05, 0x0a, 0x03, 'x', 'y', 'z'})}
	if err := (codec{}).Unmarshal(bad, &req); err == nil {
		t.Fatal("an event with a malformed id decoded without error")
	}
}

func FuzzDeliverWire(f *testing.F) {
	f.Add(uint64(0x1A2B3C8), uint64(0), "public", "orders", "insert", []byte(`{"id":1}`), []byte(`{}`), 3)
	f.Add(uint64(0), uint64(1<<63), "", "", "", []byte(nil), []byte(nil), 1)
	f.Fuzz(func(t *testing.T, lsn, idx uint64, schema, table, op string, key, payload []byte, n int) {
		n = (n%5+5)%5 + 1
		events := make([]cdc.Event, n)
		for i := range events {
			events[i] = cdc.Event{ID: cdc.EventID{CommitLSN: lsn, Index: idx + uint64(i)}, Schema: schema, Table: table, Op: cdc.Op(op), Key: key, Payload: payload}
			if len(key) == 0 {
				events[i].Key = nil
			}
			if len(payload) == 0 {
				events[i].Payload = nil
			}
		}
		b := DeliverBatch{Events: events, GapBefore: n%2 == 0, Replay: idx%3 == 0}
		if utf8.ValidString(schema) {
			b.Epoch = schema
		}
		wire := b.AppendWire(nil)
		if len(wire) != b.Size() {
			t.Fatalf("Size %d, encoded %d", b.Size(), len(wire))
		}
		// proto3 strings must be UTF-8 for the generated code (PostgreSQL
		// names always are in a UTF-8 database).
		if utf8.ValidString(schema) && utf8.ValidString(table) && utf8.ValidString(op) &&
			!proto.Equal(mustUnmarshal(t, wire), toProto(events, b.GapBefore, b.Replay, b.Epoch)) {
			t.Fatal("generated code reads something else")
		}
		back, err := decodeDeliverRequest(wire)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back.Events, events) || back.GapBefore != b.GapBefore || back.Replay != b.Replay || back.Epoch != b.Epoch {
			t.Fatalf("decoded %+v, want %+v", back, events)
		}
	})
}

// Arbitrary bytes never panic the plugin's decoder.
func FuzzDecodeDeliverRequest(f *testing.F) {
	f.Add(DeliverBatch{Events: sampleBatch(), GapBefore: true, Replay: true}.AppendWire(nil))
	f.Add([]byte{0x0a, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := decodeDeliverRequest(data)
		if err != nil {
			return
		}
		var generated sinkv1.DeliverRequest
		if proto.Unmarshal(data, &generated) == nil && (len(generated.GetEvents()) != len(req.Events) ||
			generated.GetGapBefore() != req.GapBefore || generated.GetReplay() != req.Replay || generated.GetEpoch() != req.Epoch) {
			t.Fatalf("decoded %d events (gap %v, replay %v), generated code %d (gap %v, replay %v)", len(req.Events), req.GapBefore, req.Replay,
				len(generated.GetEvents()), generated.GetGapBefore(), generated.GetReplay())
		}
	})
}

func mustUnmarshal(t *testing.T, b []byte) *sinkv1.DeliverRequest {
	t.Helper()
	var m sinkv1.DeliverRequest
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return &m
}

// A batch with big payloads is sent from the payloads' own bytes; the
// message is byte for byte the one AppendWire builds.
func TestWireBuffersMatchAppendWire(t *testing.T) {
	big := bytes.Repeat([]byte{'x'}, bigPayload+7)
	for _, gap := range []bool{false, true} {
		b := DeliverBatch{GapBefore: gap, Events: []cdc.Event{
			{ID: cdc.EventID{CommitLSN: 0x10, Index: 0}, Schema: "public", Table: "docs", Op: cdc.OpInsert, Key: []byte(`{"id":1}`), Payload: big, Route: "docs.a"},
			{ID: cdc.EventID{CommitLSN: 0x10, Index: 1}, Schema: "public", Table: "docs", Op: cdc.OpInsert, Key: []byte(`{"id":2}`), Payload: []byte(`{"small":1}`)},
			{ID: cdc.EventID{CommitLSN: 0x10, Index: 2}, Schema: "public", Table: "docs", Op: cdc.OpUpdate, Key: []byte(`{"id":3}`), Payload: big},
		}}
		got := b.wireBuffers().Materialize()
		want := b.AppendWire(nil)
		if !bytes.Equal(got, want) || len(want) != b.Size() {
			t.Fatalf("gap %v: wireBuffers gives %d bytes, AppendWire %d, Size %d", gap, len(got), len(want), b.Size())
		}
		if !b.hasBigPayload() {
			t.Fatal("hasBigPayload = false")
		}
	}
}
