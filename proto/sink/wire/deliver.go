package wire

import (
	"errors"
	"fmt"
	"math/bits"
	"sort"
	"unsafe"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/walcast/walcast/pluginkit/cdc"
)

// Deliver requests are the one hot message between the host and a plugin:
// a batch of up to thousands of events, every few milliseconds. Going
// through the generated sinkv1 types costs an Event message, an id string
// and two byte copies per event on each side, and most of a plugin's GC
// work. DeliverBatch and decodeDeliverRequest read and write the same wire
// format (sink.v1.DeliverRequest, which protocol version 2 sends too, so
// plugins written in other languages against proto/ are unaffected)
// straight from and into []cdc.Event.

// Field numbers of sink.v1.DeliverRequest and sink.v1.Event
// (proto/sink/v1/sink.proto).
const (
	fieldEvents    protowire.Number = 1 // DeliverRequest.Events
	fieldGapBefore protowire.Number = 2 // DeliverRequest.gap_before
	fieldReplay    protowire.Number = 3 // DeliverRequest.replay
	fieldEpoch     protowire.Number = 4 // DeliverRequest.epoch
	fieldID        protowire.Number = 1
	fieldSchema    protowire.Number = 2
	fieldTable     protowire.Number = 3
	fieldOp        protowire.Number = 4
	fieldKey       protowire.Number = 5
	fieldPayload   protowire.Number = 6
	// fieldRoute comes after the payload, in field order as the
	// generated code writes it; a plugin that predates it skips it like
	// any unknown field.
	fieldRoute protowire.Number = 7
	// fieldHeaders (map<string,string>) follows the route: each entry is
	// a message of its own, key field 1, value field 2.
	fieldHeaders protowire.Number = 8
	fieldMapKey  protowire.Number = 1
	fieldMapVal  protowire.Number = 2
)

// DeliverBatch is a Deliver request as the host sends it. The codec of
// ClientOptions encodes it as a sink.v1.DeliverRequest without building the
// generated messages.
type DeliverBatch struct {
	Events    []cdc.Event
	GapBefore bool   // see GapBefore
	Replay    bool   // see IsReplay
	Epoch     string // the epoch of the events' ids (sink.v1.DeliverRequest.epoch)
}

// Size is the encoded size in bytes.
func (b DeliverBatch) Size() int {
	n := 0
	for i := range b.Events {
		m := eventSize(&b.Events[i])
		n += 1 + protowire.SizeVarint(uint64(m)) + m
	}
	if b.GapBefore {
		n += 2
	}
	if b.Replay {
		n += 2
	}
	return n + fieldSize(len(b.Epoch))
}

// AppendWire appends the encoded request to buf.
func (b DeliverBatch) AppendWire(buf []byte) []byte {
	for i := range b.Events {
		buf = appendEventHead(buf, &b.Events[i])
		buf = append(buf, b.Events[i].Payload...)
		buf = appendEventTail(buf, &b.Events[i])
	}
	return b.appendTail(buf)
}

// appendEventHead appends one event of the events field up to, and not
// including, its payload's bytes; the route and headers, if any, follow
// them (appendEventTail).
func appendEventHead(buf []byte, e *cdc.Event) []byte {
	var idBuf [48]byte
	buf = protowire.AppendTag(buf, fieldEvents, protowire.BytesType)
	buf = protowire.AppendVarint(buf, uint64(eventSize(e)))
	id, _ := e.ID.AppendText(idBuf[:0])
	buf = appendField(buf, fieldID, id)
	buf = appendStringField(buf, fieldSchema, e.Schema)
	buf = appendStringField(buf, fieldTable, e.Table)
	buf = appendStringField(buf, fieldOp, string(e.Op))
	buf = appendField(buf, fieldKey, e.Key)
	if len(e.Payload) > 0 {
		buf = protowire.AppendTag(buf, fieldPayload, protowire.BytesType)
		buf = protowire.AppendVarint(buf, uint64(len(e.Payload)))
	}
	return buf
}

func (b DeliverBatch) appendTail(buf []byte) []byte {
	if b.GapBefore {
		buf = protowire.AppendTag(buf, fieldGapBefore, protowire.VarintType)
		buf = protowire.AppendVarint(buf, 1)
	}
	if b.Replay {
		buf = protowire.AppendTag(buf, fieldReplay, protowire.VarintType)
		buf = protowire.AppendVarint(buf, 1)
	}
	return appendStringField(buf, fieldEpoch, b.Epoch)
}

// bigPayload is the payload size from which the codec sends an event's
// payload from the event's own bytes instead of copying it into the
// message buffer: a row of hundreds of MB must not be held twice.
const bigPayload = 1 << 20

// hasBigPayload reports whether some event's payload is bigPayload or more.
func (b DeliverBatch) hasBigPayload() bool {
	for i := range b.Events {
		if len(b.Events[i].Payload) >= bigPayload {
			return true
		}
	}
	return false
}

// wireBuffers encodes the batch as a sequence of buffers: everything but
// the big payloads is copied into one buffer, and each big payload
// is referenced where it lies. The events must not change until gRPC has
// written the message, which holds: the host's Deliver call does not
// return before that.
func (b DeliverBatch) wireBuffers() mem.BufferSlice {
	var out mem.BufferSlice
	small := 64
	for i := range b.Events {
		small += eventSize(&b.Events[i]) + 16
		if len(b.Events[i].Payload) >= bigPayload {
			small -= len(b.Events[i].Payload)
		}
	}
	buf := make([]byte, 0, small)
	start := 0
	for i := range b.Events {
		e := &b.Events[i]
		buf = appendEventHead(buf, e)
		if len(e.Payload) < bigPayload {
			buf = append(buf, e.Payload...)
			buf = appendEventTail(buf, e)
			continue
		}
		out = append(out, mem.SliceBuffer(buf[start:len(buf):len(buf)]), mem.SliceBuffer(e.Payload))
		start = len(buf)
		buf = appendEventTail(buf, e)
	}
	buf = b.appendTail(buf)
	if start < len(buf) {
		out = append(out, mem.SliceBuffer(buf[start:]))
	}
	return out
}

// appendEventTail appends what follows an event's payload: its route and
// its headers, in key order so that the same event is always the same
// bytes.
func appendEventTail(buf []byte, e *cdc.Event) []byte {
	buf = appendStringField(buf, fieldRoute, e.Route)
	if len(e.Headers) == 0 {
		return buf
	}
	keys := make([]string, 0, len(e.Headers))
	for k := range e.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := e.Headers[k]
		buf = protowire.AppendTag(buf, fieldHeaders, protowire.BytesType)
		buf = protowire.AppendVarint(buf, uint64(headerEntrySize(k, v)))
		buf = protowire.AppendTag(buf, fieldMapKey, protowire.BytesType)
		buf = protowire.AppendString(buf, k)
		buf = protowire.AppendTag(buf, fieldMapVal, protowire.BytesType)
		buf = protowire.AppendString(buf, v)
	}
	return buf
}

// headerEntrySize is the size of one map entry message. Unlike other
// fields, generated code writes a map entry's key and value even when
// empty.
func headerEntrySize(k, v string) int {
	return 2 + protowire.SizeVarint(uint64(len(k))) + len(k) + protowire.SizeVarint(uint64(len(v))) + len(v)
}

// eventSize is the encoded size of one sink.v1.Event. Like generated
// proto3 code, empty fields are left out.
func eventSize(e *cdc.Event) int {
	n := fieldSize(idTextLen(e.ID)) + fieldSize(len(e.Schema)) + fieldSize(len(e.Table)) +
		fieldSize(len(e.Op)) + fieldSize(len(e.Key)) + fieldSize(len(e.Route)) + fieldSize(len(e.Payload))
	for k, v := range e.Headers {
		n += fieldSize(headerEntrySize(k, v))
	}
	return n
}

// fieldSize is the size of a length-delimited field numbered below 16.
func fieldSize(n int) int {
	if n == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(uint64(n)) + n
}

func appendField(buf []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return buf
	}
	buf = protowire.AppendTag(buf, num, protowire.BytesType)
	return protowire.AppendBytes(buf, v)
}

func appendStringField(buf []byte, num protowire.Number, v string) []byte {
	if len(v) == 0 {
		return buf
	}
	buf = protowire.AppendTag(buf, num, protowire.BytesType)
	return protowire.AppendString(buf, v)
}

// idTextLen is len(id.String()) without formatting it.
func idTextLen(id cdc.EventID) int {
	hex := func(v uint64) int { return max(1, (bits.Len64(v)+3)/4) }
	dec := 1
	for v := id.Index; v >= 10; v /= 10 {
		dec++
	}
	return hex(id.CommitLSN>>32) + 1 + hex(id.CommitLSN&0xFFFFFFFF) + 1 + dec
}

// DeliverRequest is what the plugin side's codec decodes a Deliver request
// into: the events point into the received message, which is never reused.
type DeliverRequest struct {
	Events    []cdc.Event
	GapBefore bool
	Replay    bool
	Epoch     string
}

// decodeDeliverRequest decodes a sink.v1.DeliverRequest. Keys and
// payloads are slices of data, which the caller hands over (it must never
// be reused: a sink may keep an event's bytes after Deliver returns), and
// schema and table names are shared between consecutive events of the
// same table.
func decodeDeliverRequest(data []byte) (DeliverRequest, error) {
	count := 0
	for rest := data; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return DeliverRequest{}, fmt.Errorf("decode deliver request: %w", protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, rest[n:])
		if m < 0 {
			return DeliverRequest{}, fmt.Errorf("decode deliver request: %w", protowire.ParseError(m))
		}
		if num == fieldEvents && typ == protowire.BytesType {
			count++
		}
		rest = rest[n+m:]
	}
	var d eventDecoder
	req := DeliverRequest{Events: make([]cdc.Event, 0, count)}
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		data = data[n:]
		switch {
		case num == fieldEvents && typ == protowire.BytesType:
			msg, m := protowire.ConsumeBytes(data)
			data = data[m:]
			ev, err := d.decode(msg)
			if err != nil {
				return DeliverRequest{}, fmt.Errorf("decode deliver request: event %d: %w", len(req.Events), err)
			}
			req.Events = append(req.Events, ev)
		case num == fieldGapBefore && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(data)
			data = data[m:]
			req.GapBefore = v != 0
		case num == fieldReplay && typ == protowire.VarintType:
			v, m := protowire.ConsumeVarint(data)
			data = data[m:]
			req.Replay = v != 0
		case num == fieldEpoch && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(data)
			data = data[m:]
			req.Epoch = string(v)
		default:
			data = data[protowire.ConsumeFieldValue(num, typ, data):]
		}
	}
	return req, nil
}

type eventDecoder struct {
	schema, table string
}

func (d *eventDecoder) decode(msg []byte) (cdc.Event, error) {
	var ev cdc.Event
	seenID := false
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return cdc.Event{}, protowire.ParseError(n)
		}
		msg = msg[n:]
		if typ != protowire.BytesType || num < fieldID || num > fieldHeaders {
			m := protowire.ConsumeFieldValue(num, typ, msg)
			if m < 0 {
				return cdc.Event{}, protowire.ParseError(m)
			}
			msg = msg[m:]
			continue
		}
		v, m := protowire.ConsumeBytes(msg)
		if m < 0 {
			return cdc.Event{}, protowire.ParseError(m)
		}
		msg = msg[m:]
		switch num {
		case fieldID:
			// cdc.ParseEventID keeps nothing of its argument, so the bytes
			// can be read in place.
			id, err := cdc.ParseEventID(unsafe.String(unsafe.SliceData(v), len(v)))
			if err != nil {
				return cdc.Event{}, err
			}
			ev.ID, seenID = id, true
		case fieldSchema:
			if string(v) != d.schema {
				d.schema = string(v)
			}
			ev.Schema = d.schema
		case fieldTable:
			if string(v) != d.table {
				d.table = string(v)
			}
			ev.Table = d.table
		case fieldOp:
			ev.Op = opOf(v)
		case fieldKey:
			ev.Key = clip(v)
		case fieldPayload:
			ev.Payload = clip(v)
		case fieldRoute:
			ev.Route = string(v)
		case fieldHeaders:
			k, val, err := decodeHeader(v)
			if err != nil {
				return cdc.Event{}, fmt.Errorf("headers: %w", err)
			}
			if ev.Headers == nil {
				ev.Headers = map[string]string{}
			}
			ev.Headers[k] = val
		}
	}
	if !seenID {
		return cdc.Event{}, errors.New("no id")
	}
	return ev, nil
}

// decodeHeader decodes one entry of the headers map.
func decodeHeader(msg []byte) (k, v string, err error) {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return "", "", protowire.ParseError(n)
		}
		msg = msg[n:]
		if typ != protowire.BytesType || (num != fieldMapKey && num != fieldMapVal) {
			m := protowire.ConsumeFieldValue(num, typ, msg)
			if m < 0 {
				return "", "", protowire.ParseError(m)
			}
			msg = msg[m:]
			continue
		}
		b, m := protowire.ConsumeBytes(msg)
		if m < 0 {
			return "", "", protowire.ParseError(m)
		}
		msg = msg[m:]
		if num == fieldMapKey {
			k = string(b)
		} else {
			v = string(b)
		}
	}
	return k, v, nil
}

// clip limits v's capacity to its length, so that a sink appending to one
// event's bytes cannot overwrite the next field in the request buffer.
func clip(v []byte) []byte {
	if len(v) == 0 {
		return nil
	}
	return v[:len(v):len(v)]
}

func opOf(v []byte) cdc.Op {
	switch string(v) {
	case string(cdc.OpInsert):
		return cdc.OpInsert
	case string(cdc.OpUpdate):
		return cdc.OpUpdate
	case string(cdc.OpDelete):
		return cdc.OpDelete
	case string(cdc.OpTruncate):
		return cdc.OpTruncate
	case string(cdc.OpRead):
		return cdc.OpRead
	case string(cdc.OpSchema):
		return cdc.OpSchema
	case string(cdc.OpDetach):
		return cdc.OpDetach
	}
	return cdc.Op(v)
}
