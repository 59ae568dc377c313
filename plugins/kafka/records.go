package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// The records of one event, following the convention Kafka users know from
// Debezium so that compacted topics, Kafka Streams KTables and upsert
// consumers forget deleted rows:
//
//   - insert, update, read: one record, key = the row key, value = the
//     envelope;
//   - delete: the delete's record, then a tombstone (same key, null value);
//   - update that changes the key: a delete record for the old key (the
//     update's envelope with op "delete", key = the old key, new = null),
//     a tombstone for the old key, then the update's record under the new
//     key;
//   - an outbox event (one with headers, docs/outbox.md): one record,
//     key = the aggregate id, value = the payload, the event's headers
//     after walcast's own; never a tombstone;
//   - truncate, and every event of a table without a key: key
//     {"walcast_id":"<event id>"}, never followed by a tombstone. A shared
//     key ("null") would let compaction keep only the last of these
//     unrelated records; a key of their own keeps each one.
//
// Tombstones and old-key deletes are produced with the event's records, so
// with eos they commit or abort in the same transaction. They carry the
// walcast-id, walcast-op and walcast-table headers of the event they come
// from, plus walcast-derived ("tombstone" or "old-key-delete") so that a
// consumer counting events can leave them out. tombstones = false turns
// both off.

const (
	derivedHeader   = "walcast-derived"
	derivedTomb     = "tombstone"
	derivedOldKeyDl = "old-key-delete"
)

// nullKey is the key the host gives truncates and rows of keyless tables.
var nullKey = []byte("null")

// eventRecords appends the records of e (see above) to recs.
func (s *Sink) eventRecords(recs []*kgo.Record, topic string, e *pluginkit.Event) []*kgo.Record {
	headers := func(op pluginkit.Op, derived string) []kgo.RecordHeader {
		h := []kgo.RecordHeader{
			{Key: "walcast-id", Value: []byte(e.ID.String())},
			{Key: "walcast-op", Value: []byte(op)},
			{Key: "walcast-table", Value: []byte(e.Schema + "." + e.Table)},
		}
		if derived != "" {
			h = append(h, kgo.RecordHeader{Key: derivedHeader, Value: []byte(derived)})
		}
		return h
	}
	if len(e.Headers) > 0 {
		return append(recs, outboxRecord(topic, e, headers(e.Op, "")))
	}
	key := e.Key
	keyless := len(bytes.TrimSpace(key)) == 0 || bytes.Equal(bytes.TrimSpace(key), nullKey)
	if keyless {
		key = fmt.Appendf(nil, `{"walcast_id":%q}`, e.ID.String())
	}
	if cdc.IsCloudEvent(e.Payload) {
		return append(recs, s.cloudEventRecord(topic, key, e, headers(e.Op, "")))
	}
	tombstones := s.cfg.tombstones && !keyless
	if tombstones && e.Op == pluginkit.OpUpdate {
		if kc, ok := debeziumKeyChange(e); ok {
			del := headers(pluginkit.OpDelete, derivedOldKeyDl)
			del = append(del, kgo.RecordHeader{Key: dbzNewKeyHeader, Value: key})
			create := headers(e.Op, "")
			create = append(create, kgo.RecordHeader{Key: dbzOldKeyHeader, Value: kc.oldKey})
			return append(recs,
				&kgo.Record{Topic: topic, Key: kc.oldKey, Value: kc.del, Headers: del},
				&kgo.Record{Topic: topic, Key: kc.oldKey, Headers: headers(pluginkit.OpDelete, derivedTomb)},
				&kgo.Record{Topic: topic, Key: key, Value: kc.create, Headers: create},
			)
		}
		if oldKey, del, ok := oldKeyDelete(e); ok {
			recs = append(recs,
				&kgo.Record{Topic: topic, Key: oldKey, Value: del, Headers: headers(pluginkit.OpDelete, derivedOldKeyDl)},
				&kgo.Record{Topic: topic, Key: oldKey, Headers: headers(pluginkit.OpDelete, derivedTomb)},
			)
		}
	}
	recs = append(recs, &kgo.Record{Topic: topic, Key: key, Value: e.Payload, Headers: headers(e.Op, "")})
	if tombstones && e.Op == pluginkit.OpDelete {
		recs = append(recs, &kgo.Record{Topic: topic, Key: key, Headers: headers(e.Op, derivedTomb)})
	}
	return recs
}

// oldKeyDelete looks at an update's envelope: when its "old" holds key
// columns whose values differ from the new key, it returns the old key (the
// key's columns, in the key's order, with the values "old" has) and the
// delete envelope for it. The envelope is read rather than sent separately
// because it already carries "old": with the default replica identity
// PostgreSQL includes it exactly when the key changed, with REPLICA IDENTITY
// FULL always (hence the comparison).
func oldKeyDelete(e *pluginkit.Event) (oldKey, del []byte, ok bool) {
	old, found := e.Member("old")
	if !found || string(old) == "null" {
		// The common update: the key did not change and PostgreSQL sent
		// no old tuple. Found without decoding the envelope, which cost
		// about a third of this plugin's CPU.
		return nil, nil, false
	}
	if oldKey, ok = changedKey(e.Key, old); !ok {
		return nil, nil, false
	}
	env, err := objectFields(e.Payload)
	if err != nil {
		return nil, nil, false
	}
	return oldKey, deleteEnvelope(env, oldKey), true
}

// changedKey returns the key columns of key with the values old has for
// them, when at least one differs; false when they are all equal or old
// lacks one.
func changedKey(key, old []byte) ([]byte, bool) {
	keyFields, err := objectFields(key)
	if err != nil || len(keyFields) == 0 {
		return nil, false
	}
	oldFields, err := objectFields(old)
	if err != nil || len(oldFields) == 0 {
		return nil, false
	}
	values := make(map[string]json.RawMessage, len(oldFields))
	for _, f := range oldFields {
		values[f.name] = f.value
	}
	var b bytes.Buffer
	b.WriteByte('{')
	changed := false
	for i, f := range keyFields {
		v, found := values[f.name]
		if !found {
			return nil, false // "old" without the key: nothing to compare
		}
		if !jsonEqual(v, f.value) {
			changed = true
		}
		if i > 0 {
			b.WriteByte(',')
		}
		name, _ := json.Marshal(f.name)
		b.Write(name)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), changed
}

// deleteEnvelope writes the delete of oldKey: the update's fields in their
// order, with op, key, new and unchanged replaced.
func deleteEnvelope(env []field, oldKey []byte) []byte {
	var d bytes.Buffer
	d.WriteByte('{')
	for i, f := range env {
		if i > 0 {
			d.WriteByte(',')
		}
		name, _ := json.Marshal(f.name)
		d.Write(name)
		d.WriteByte(':')
		switch f.name {
		case "op":
			d.WriteString(`"delete"`)
		case "key":
			d.Write(oldKey)
		case "new":
			d.WriteString("null")
		case "unchanged":
			d.WriteString("[]")
		default:
			d.Write(f.value)
		}
	}
	d.WriteByte('}')
	return d.Bytes()
}

type field struct {
	name  string
	value json.RawMessage
}

// objectFields returns the members of a JSON object in their order; a JSON
// null or empty input gives none.
func objectFields(b []byte) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok == nil {
		return nil, nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var out []field
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, ok := tok.(string)
		if !ok {
			return nil, errors.New("object key is not a string")
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, field{name: name, value: v})
	}
	if _, err := dec.Token(); err != nil && err != io.EOF {
		return nil, err
	}
	return out, nil
}

// jsonEqual compares two JSON values as the host encodes them: compactly,
// so equal values have equal bytes up to whitespace.
func jsonEqual(a, b []byte) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

// outboxRecord is the record of an outbox event: the headers the event
// carries ("id", "type") follow walcast's, in name order so that a
// redelivered event is the same record.
func outboxRecord(topic string, e *pluginkit.Event, h []kgo.RecordHeader) *kgo.Record {
	for _, k := range slices.Sorted(maps.Keys(e.Headers)) {
		h = append(h, kgo.RecordHeader{Key: k, Value: []byte(e.Headers[k])})
	}
	return &kgo.Record{Topic: topic, Key: e.Key, Value: e.Payload, Headers: h}
}
