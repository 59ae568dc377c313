package main

import (
	"bytes"

	"github.com/walcast/walcast/pluginkit"
)

// Events in Debezium's change event format (a sink with format =
// "debezium", docs/formats.md) carry "before" and "op" where the envelope
// has "old"; with schemas, inside {"schema":…,"payload":…}. An update that
// changed the key becomes what Debezium's PostgreSQL connector sends for a
// primary key update: a delete of the old key (header __debezium.newkey),
// its tombstone, then a create under the new key (header
// __debezium.oldkey).

// Debezium's headers on the records of a primary key update.
const (
	dbzNewKeyHeader = "__debezium.newkey"
	dbzOldKeyHeader = "__debezium.oldkey"
)

// dbzKeyChange is a Debezium update split as Debezium splits it.
type dbzKeyChange struct {
	oldKey, del, create []byte
}

// debeziumKeyChange recognizes a Debezium update whose "before" holds key
// values other than the record key's, and returns its records' keys and
// values. Anything else (the envelope, other ops, an unchanged key)
// reports false.
func debeziumKeyChange(e *pluginkit.Event) (dbzKeyChange, bool) {
	// "op" first: the envelope's ("update") and every other op end the
	// check after a short scan; only a payload without a top-level "op"
	// (schemas: it is inside "payload") is unwrapped.
	value, valueSchema, wrapped := e.Payload, []byte(nil), false
	op, found := member(value, "op")
	if !found {
		value, valueSchema, wrapped = dbzUnwrap(e.Payload)
		op, found = member(value, "op")
	}
	if !found || string(op) != `"u"` {
		return dbzKeyChange{}, false
	}
	before, found := member(value, "before")
	if !found || string(before) == "null" {
		return dbzKeyChange{}, false
	}
	key, keySchema, _ := dbzUnwrap(e.Key)
	oldKey, changed := changedKey(key, before)
	if !changed {
		return dbzKeyChange{}, false
	}
	fields, err := objectFields(value)
	if err != nil {
		return dbzKeyChange{}, false
	}
	kc := dbzKeyChange{
		del:    dbzRewrite(fields, "after", "d"),
		create: dbzRewrite(fields, "before", "c"),
		oldKey: oldKey,
	}
	if wrapped {
		kc.del = dbzWrap(valueSchema, kc.del)
		kc.create = dbzWrap(valueSchema, kc.create)
		if keySchema != nil {
			kc.oldKey = dbzWrap(keySchema, kc.oldKey)
		}
	}
	return kc, true
}

// dbzUnwrap returns the payload and schema of {"schema":…,"payload":…},
// or b itself when it is not wrapped.
func dbzUnwrap(b []byte) (payload, schema []byte, wrapped bool) {
	schema, hasSchema := member(b, "schema")
	payload, hasPayload := member(b, "payload")
	if !hasSchema || !hasPayload {
		return b, nil, false
	}
	return payload, schema, true
}

func dbzWrap(schema, payload []byte) []byte {
	var b bytes.Buffer
	b.WriteString(`{"schema":`)
	b.Write(schema)
	b.WriteString(`,"payload":`)
	b.Write(payload)
	b.WriteByte('}')
	return b.Bytes()
}

// dbzRewrite writes the value's fields in their order with field null and
// op set.
func dbzRewrite(fields []field, null string, op string) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(f.name)
		b.WriteString(`":`)
		switch f.name {
		case null:
			b.WriteString("null")
		case "op":
			b.WriteString(`"` + op + `"`)
		default:
			b.Write(f.value)
		}
	}
	b.WriteByte('}')
	return b.Bytes()
}

// member is the raw value of an object's top-level member name.
func member(obj []byte, name string) ([]byte, bool) {
	e := pluginkit.Event{Payload: obj}
	return e.Member(name)
}
