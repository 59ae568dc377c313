package decode

import (
	"encoding/base64"
	"strconv"

	"github.com/jackc/pglogrepl"

	"github.com/walcast/walcast/pluginkit/cdc"
)

// The debezium format: Debezium's PostgreSQL connector change event, value
//
//	{"before":…,"after":…,"source":{…},"op":"c|u|d|r|t","ts_ms":…,"ts_us":…,"ts_ns":…,
//	 "transaction":{"id":"<txId>:<commit LSN>","total_order":…,"data_collection_order":…}}
//
// and key {"<key column>":…,…}, each wrapped in {"schema":…,"payload":…}
// with Schemas. docs/formats.md lists where it differs from Debezium's.

// unavailable is Debezium's unavailable.value.placeholder default, written
// for an unchanged TOASTed value PostgreSQL did not send.
const unavailable = "__debezium_unavailable_value"

// dbzTable is a relation as format i writes it, built once per Relation
// message.
type dbzTable struct {
	opts *DebeziumOptions
	cols []dbzColumn
	// keyHead and valueHead open the key and the value (with Schemas, up
	// to "payload":); tail closes either.
	keyHead, valueHead, tail []byte
	// sourceHead, sourceDB and sourceTable are the parts of the source
	// block that depend only on the table, between the values of the
	// transaction.
	sourceHead, sourceDB, sourceTable []byte
}

// debezium returns relation rel as format i writes it.
func (d *Decoder) debezium(i int, rel *relation) *dbzTable {
	if rel.formats == nil {
		rel.formats = make([]*dbzTable, len(d.opts.Formats))
	}
	if t := rel.formats[i]; t != nil {
		return t
	}
	t := newDbzTable(&d.opts.Formats[i].Debezium, rel)
	rel.formats[i] = t
	return t
}

func newDbzTable(opts *DebeziumOptions, rel *relation) *dbzTable {
	t := &dbzTable{opts: opts, cols: make([]dbzColumn, len(rel.cols))}
	for i := range rel.cols {
		t.cols[i] = dbzColumnFor(rel.cols[i].oid, rel.cols[i].typmod, opts.Decimal)
	}
	prefix := opts.Name + "." + rel.schema + "." + rel.table
	if opts.Schemas {
		t.keyHead = append([]byte(`{"schema":`), t.keySchema(rel, prefix+".Key")...)
		t.keyHead = append(t.keyHead, `,"payload":`...)
		t.valueHead = append([]byte(`{"schema":`), t.envelopeSchema(rel, prefix)...)
		t.valueHead = append(t.valueHead, `,"payload":`...)
		t.tail = []byte("}")
	}
	t.valueHead = append(t.valueHead, `{"before":`...)

	s := []byte(`,"source":{"version":`)
	s = appendJSONString(s, []byte(opts.Version))
	s = append(s, `,"connector":"postgresql","name":`...)
	s = appendJSONString(s, []byte(opts.Name))
	s = append(s, `,"ts_ms":`...)
	t.sourceHead = s
	t.sourceDB = appendJSONString([]byte(`,"db":`), []byte(opts.Database))
	s = appendJSONString([]byte(`,"schema":`), []byte(rel.schema))
	s = append(s, `,"table":`...)
	s = appendJSONString(s, []byte(rel.table))
	t.sourceTable = append(s, `,"txId":`...)
	return t
}

// appendKey appends the key of a change: the key columns of tuple
// (falling back to the old tuple for an unchanged TOASTed key column),
// null for a truncate and for a table without a key.
func (t *dbzTable) appendKey(b []byte, d *Decoder, rel *relation, tuple, fallback []*pglogrepl.TupleDataColumn, op cdc.Op) []byte {
	if op == cdc.OpTruncate || len(rel.keyCols) == 0 {
		return append(b, "null"...)
	}
	if tuple == nil {
		tuple, fallback = fallback, nil // a delete's key is in its old tuple
	}
	b = append(b, t.keyHead...)
	b = append(b, '{')
	first := true
	for _, i := range rel.keyCols {
		v := tuple[i]
		if v.DataType == pglogrepl.TupleDataTypeToast && fallback != nil {
			v = fallback[i]
		}
		if v.DataType == pglogrepl.TupleDataTypeToast {
			continue // see Decoder.appendKey
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, rel.cols[i].name...)
		b = t.appendColumn(b, d, i, &rel.cols[i], v)
	}
	b = append(b, '}')
	return append(b, t.tail...)
}

// appendValue appends the value of a change.
func (t *dbzTable) appendValue(b []byte, d *Decoder, c *rowChange) []byte {
	b = append(b, t.valueHead...)
	switch {
	case c.oldTuple == nil:
		b = append(b, "null"...)
	default:
		b = t.appendRow(b, d, c.rel, c.oldTuple, c.oldKind == pglogrepl.UpdateMessageTupleTypeKey)
	}
	b = append(b, `,"after":`...)
	if c.newTuple == nil {
		b = append(b, "null"...)
	} else {
		b = t.appendRow(b, d, c.rel, c.newTuple, false)
	}
	b = t.appendSource(b, d, c.op)
	b = append(b, `,"op":"`...)
	b = append(b, dbzOp(c.op)...)
	b = append(b, '"')
	tx := d.dbzTx()
	b = append(b, tx.tail...)
	// transaction: Debezium's metadata block. total_order is the walcast
	// id's index + 1, so (id, total_order) names the event as its walcast
	// id does, for consumers that receive no walcast-id header.
	b = append(b, tx.txID...)
	b = strconv.AppendUint(b, d.index+1, 10)
	b = append(b, `,"data_collection_order":`...)
	b = strconv.AppendUint(b, c.rel.inTx, 10)
	b = append(b, "}}"...)
	return append(b, t.tail...)
}

// appendRow appends a tuple with every column of the table: a column an
// old key tuple does not carry is null, an unchanged TOASTed value is
// Debezium's placeholder.
func (t *dbzTable) appendRow(b []byte, d *Decoder, rel *relation, tuple []*pglogrepl.TupleDataColumn, keyOnly bool) []byte {
	b = append(b, '{')
	for i, v := range tuple {
		if i > 0 {
			b = append(b, ',')
		}
		col := &rel.cols[i]
		b = append(b, col.name...)
		switch {
		case v.DataType == pglogrepl.TupleDataTypeToast:
			b = t.appendUnavailable(b, i)
		case keyOnly && !col.identity:
			b = append(b, "null"...)
		default:
			b = t.appendColumn(b, d, i, col, v)
		}
	}
	return append(b, '}')
}

// appendUnavailable appends the placeholder in column i's type.
func (t *dbzTable) appendUnavailable(b []byte, i int) []byte {
	switch t.cols[i].typ {
	case dzBytes:
		b = append(b, '"')
		b = base64.StdEncoding.AppendEncode(b, []byte(unavailable))
		return append(b, '"')
	case dzArray:
		return append(b, `["`+unavailable+`"]`...)
	}
	return append(b, `"`+unavailable+`"`...)
}

func (t *dbzTable) appendColumn(b []byte, d *Decoder, i int, col *column, v *pglogrepl.TupleDataColumn) []byte {
	if v.DataType == pglogrepl.TupleDataTypeNull {
		return append(b, "null"...)
	}
	return d.appendDbzValue(b, &t.cols[i], col, v.Data)
}

// appendSource appends the source block, fields in the order of
// Debezium's io.debezium.connector.postgresql.Source schema.
func (t *dbzTable) appendSource(b []byte, d *Decoder, op cdc.Op) []byte {
	tx := d.dbzTx()
	b = append(b, t.sourceHead...)
	b = append(b, tx.tsMs...)
	if op == cdc.OpRead {
		b = append(b, `,"snapshot":"incremental"`...)
	} else {
		b = append(b, `,"snapshot":"false"`...)
	}
	b = append(b, t.sourceDB...)
	b = append(b, tx.mid...)
	b = append(b, t.sourceTable...)
	return append(b, tx.end...)
}

// dbzTxParts are the parts of the debezium format that depend only on the
// transaction, encoded once per transaction.
type dbzTxParts struct {
	lsn uint64
	// tsMs is source.ts_ms; mid runs from sequence to ts_ns; end from
	// txId's value to the end of the source block; tail from the
	// envelope's ts_ms up to transaction; txID opens the transaction
	// block up to total_order's value.
	tsMs, mid, end, tail, txID []byte
}

// dbzTx returns the open transaction's parts, encoding them on its first
// event.
func (d *Decoder) dbzTx() *dbzTxParts {
	tx := &d.dbzParts
	if tx.lsn == d.commitLSN && tx.tsMs != nil {
		return tx
	}
	tx.lsn = d.commitLSN
	ms, us, ns := d.commitTime.UnixMilli(), d.commitTime.UnixMicro(), d.commitTime.UnixNano()
	tx.tsMs = strconv.AppendInt(tx.tsMs[:0], ms, 10)
	// sequence: Debezium's [last committed LSN, this change's LSN]; the
	// decoder knows the commit LSN only (docs/formats.md).
	b := append(tx.mid[:0], `,"sequence":"[\"`...)
	b = strconv.AppendUint(b, d.commitLSN, 10)
	b = append(b, `\",\"`...)
	b = strconv.AppendUint(b, d.commitLSN, 10)
	b = append(b, `\"]","ts_us":`...)
	b = strconv.AppendInt(b, us, 10)
	b = append(b, `,"ts_ns":`...)
	tx.mid = strconv.AppendInt(b, ns, 10)
	b = strconv.AppendUint(tx.end[:0], uint64(d.xid), 10)
	b = append(b, `,"lsn":`...)
	b = strconv.AppendUint(b, d.commitLSN, 10)
	tx.end = append(b, `,"xmin":null}`...)
	// ts_ms is Debezium's processing time; walcast writes the commit time
	// so that a redelivered event is the same bytes (docs/formats.md).
	b = append(tx.tail[:0], `,"ts_ms":`...)
	b = strconv.AppendInt(b, ms, 10)
	b = append(b, `,"ts_us":`...)
	b = strconv.AppendInt(b, us, 10)
	b = append(b, `,"ts_ns":`...)
	b = strconv.AppendInt(b, ns, 10)
	tx.tail = b
	// Debezium's PostgreSQL transaction id: "<txId>:<LSN>".
	b = append(tx.txID[:0], `,"transaction":{"id":"`...)
	b = strconv.AppendUint(b, uint64(d.xid), 10)
	b = append(b, ':')
	b = strconv.AppendUint(b, d.commitLSN, 10)
	tx.txID = append(b, `","total_order":`...)
	return tx
}

// dbzOp is Debezium's one-letter operation.
func dbzOp(op cdc.Op) string {
	switch op {
	case cdc.OpInsert:
		return "c"
	case cdc.OpUpdate:
		return "u"
	case cdc.OpDelete:
		return "d"
	case cdc.OpRead:
		return "r"
	case cdc.OpTruncate:
		return "t"
	}
	return string(op)
}
