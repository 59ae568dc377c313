package decode

import (
	"strconv"
)

// The schema blocks of the debezium format with Schemas: Kafka Connect
// schemas as its JSON converter writes them (schemas.enable=true), with
// the names Debezium's PostgreSQL connector gives them.

// keySchema is the schema of the table's key.
func (t *dbzTable) keySchema(rel *relation, name string) []byte {
	b := []byte(`{"type":"struct","fields":[`)
	for n, i := range rel.keyCols {
		if n > 0 {
			b = append(b, ',')
		}
		b = t.appendFieldSchema(b, rel, i, false)
	}
	b = append(b, `],"optional":false,"name":`...)
	b = appendJSONString(b, []byte(name))
	return append(b, '}')
}

// envelopeSchema is the schema of the value.
func (t *dbzTable) envelopeSchema(rel *relation, prefix string) []byte {
	row := func(b []byte, field string) []byte {
		b = append(b, `{"type":"struct","fields":[`...)
		for i := range rel.cols {
			if i > 0 {
				b = append(b, ',')
			}
			// Key columns are required; pgoutput does not say which other
			// columns are NOT NULL, so they are all optional.
			b = t.appendFieldSchema(b, rel, i, !rel.cols[i].identity)
		}
		b = append(b, `],"optional":true,"name":`...)
		b = appendJSONString(b, []byte(prefix+".Value"))
		return append(b, `,"field":"`+field+`"}`...)
	}
	b := []byte(`{"type":"struct","fields":[`)
	b = row(b, "before")
	b = append(b, ',')
	b = row(b, "after")
	b = append(b, `,`+dbzSourceSchema+`,{"type":"string","optional":false,"field":"op"},{"type":"int64","optional":true,"field":"ts_ms"},{"type":"int64","optional":true,"field":"ts_us"},{"type":"int64","optional":true,"field":"ts_ns"},`+dbzTransactionSchema+`],"optional":false,"name":`...)
	b = appendJSONString(b, []byte(prefix+".Envelope"))
	return append(b, `,"version":2}`...)
}

// dbzSourceSchema is io.debezium.connector.postgresql.Source.
const dbzSourceSchema = `{"type":"struct","fields":[` +
	`{"type":"string","optional":false,"field":"version"},` +
	`{"type":"string","optional":false,"field":"connector"},` +
	`{"type":"string","optional":false,"field":"name"},` +
	`{"type":"int64","optional":false,"field":"ts_ms"},` +
	`{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},"default":"false","field":"snapshot"},` +
	`{"type":"string","optional":false,"field":"db"},` +
	`{"type":"string","optional":true,"field":"sequence"},` +
	`{"type":"int64","optional":true,"field":"ts_us"},` +
	`{"type":"int64","optional":true,"field":"ts_ns"},` +
	`{"type":"string","optional":false,"field":"schema"},` +
	`{"type":"string","optional":false,"field":"table"},` +
	`{"type":"int64","optional":true,"field":"txId"},` +
	`{"type":"int64","optional":true,"field":"lsn"},` +
	`{"type":"int64","optional":true,"field":"xmin"}` +
	`],"optional":false,"name":"io.debezium.connector.postgresql.Source","version":1,"field":"source"}`

// dbzTransactionSchema is Debezium's event.block.
const dbzTransactionSchema = `{"type":"struct","fields":[` +
	`{"type":"string","optional":false,"field":"id"},` +
	`{"type":"int64","optional":false,"field":"total_order"},` +
	`{"type":"int64","optional":false,"field":"data_collection_order"}` +
	`],"optional":true,"name":"event.block","version":1,"field":"transaction"}`

// appendFieldSchema appends the schema of column i as a struct field.
func (t *dbzTable) appendFieldSchema(b []byte, rel *relation, i int, optional bool) []byte {
	c := &t.cols[i]
	lit, name := c.schemaType()
	b = append(b, `{"type":"`...)
	b = append(b, lit...)
	b = append(b, '"')
	switch {
	case c.typ == dzVarDecimal:
		b = append(b, `,"fields":[{"type":"int32","optional":false,"field":"scale"},{"type":"bytes","optional":false,"field":"value"}]`...)
	case c.typ == dzArray:
		b = append(b, `,"items":{"type":"`...)
		b = append(b, arrayItemType(rel.cols[i].typ.kind)...)
		b = append(b, `","optional":true}`...)
	}
	b = append(b, `,"optional":`...)
	b = strconv.AppendBool(b, optional)
	if name != "" {
		b = append(b, `,"name":"`...)
		b = append(b, name...)
		b = append(b, `","version":1`...)
	}
	if c.typ == dzDecimal {
		b = append(b, `,"parameters":{"scale":"`...)
		b = strconv.AppendInt(b, int64(c.scale), 10)
		b = append(b, '"')
		if c.precision > 0 {
			b = append(b, `,"connect.decimal.precision":"`...)
			b = strconv.AppendInt(b, int64(c.precision), 10)
			b = append(b, '"')
		}
		b = append(b, '}')
	}
	if c.typ == dzVarDecimal {
		b = append(b, `,"doc":"Variable scaled decimal"`...)
	}
	b = append(b, `,"field":`...)
	b = append(b, rel.cols[i].quoted...)
	return append(b, '}')
}

// schemaType is the column's Kafka Connect literal type and semantic name.
func (c *dbzColumn) schemaType() (literal, name string) {
	switch c.typ {
	case dzBool:
		return "boolean", ""
	case dzInt16:
		return "int16", ""
	case dzInt32:
		return "int32", ""
	case dzInt64:
		return "int64", ""
	case dzFloat32:
		return "float", ""
	case dzFloat64, dzNumDouble:
		return "double", ""
	case dzBytes:
		return "bytes", ""
	case dzJSON:
		return "string", "io.debezium.data.Json"
	case dzUUID:
		return "string", "io.debezium.data.Uuid"
	case dzXML:
		return "string", "io.debezium.data.Xml"
	case dzDecimal:
		return "bytes", "org.apache.kafka.connect.data.Decimal"
	case dzVarDecimal:
		return "struct", "io.debezium.data.VariableScaleDecimal"
	case dzDate:
		return "int32", "io.debezium.time.Date"
	case dzTime:
		return "int32", "io.debezium.time.Time"
	case dzMicroTime:
		return "int64", "io.debezium.time.MicroTime"
	case dzTimestamp:
		return "int64", "io.debezium.time.Timestamp"
	case dzMicroTimestamp:
		return "int64", "io.debezium.time.MicroTimestamp"
	case dzZonedTimestamp:
		return "string", "io.debezium.time.ZonedTimestamp"
	case dzZonedTime:
		return "string", "io.debezium.time.ZonedTime"
	case dzInterval:
		return "int64", "io.debezium.time.MicroDuration"
	case dzArray:
		return "array", ""
	}
	return "string", ""
}

// arrayItemType is the literal type of an array's elements, as the
// envelope writes them.
func arrayItemType(k kind) string {
	switch k {
	case kindInt:
		return "int64"
	case kindFloat:
		return "double"
	case kindBool:
		return "boolean"
	case kindBytea:
		return "bytes"
	}
	return "string"
}
