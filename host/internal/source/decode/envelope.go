package decode

import (
	"bytes"
	"strconv"

	"github.com/jackc/pglogrepl"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// The envelope's fields, in order:
//
//	{"id":…,"commit_lsn":…,"xid":…,"commit_time":…,"schema":…,"table":…,
//	 "op":…,"key":…,"new":…,"old":…[,"cascade":…,"restart_identity":…][,"unchanged":[…]]}
//
// cascade and restart_identity appear only on truncate events, unchanged
// only when the new tuple has unchanged TOASTed columns.

// change encodes an insert, update or delete into d.buf and emits it.
// newTuple is nil for a delete; oldTuple is nil when pgoutput sent none, and
// oldKind says whether it holds only the replica identity ('K') or the whole
// row ('O').
func (d *Decoder) change(rel *relation, op cdc.Op, newTuple, oldTuple []*pglogrepl.TupleDataColumn, oldKind uint8, emit func(change.Event) error) error {
	// A row of large values: size the envelope once instead of letting
	// append double it (each doubling leaves the previous array as
	// garbage, and for a row of hundreds of MB that is most of the
	// process's peak memory).
	if n := tupleBytes(newTuple) + tupleBytes(oldTuple); n > bigEnvelope && cap(d.buf) < n+n/8+4096 {
		d.buf = make([]byte, 0, n+n/8+4096)
	}
	b := d.appendHead(d.buf[:0], rel, op)

	b = append(b, `"key":`...)
	keyStart := len(b)
	if newTuple != nil {
		// The key as it is after the change; an unchanged TOASTed key
		// column is only in the old tuple.
		b = d.appendKey(b, rel, newTuple, oldTuple)
	} else {
		b = d.appendKey(b, rel, oldTuple, nil)
	}
	keyEnd := len(b)
	// An update that changed the key belongs to two rows: say which was
	// the other, so the scheduler can order it after both rows' changes.
	var oldKey []byte
	if newTuple != nil && oldTuple != nil && len(rel.keyCols) > 0 {
		d.oldKey = d.appendKey(d.oldKey[:0], rel, oldTuple, nil)
		if !bytes.Equal(d.oldKey, b[keyStart:keyEnd]) {
			oldKey = d.oldKey
		}
	}

	var lay change.Layout
	b = append(b, `,"new":`...)
	lay.New[0] = len(b)
	d.unchanged = d.unchanged[:0]
	if newTuple != nil {
		b = d.appendRow(b, rel, newTuple, rowNew)
	} else {
		b = append(b, "null"...)
	}
	lay.New[1] = len(b)

	b = append(b, `,"old":`...)
	lay.Old[0] = len(b)
	switch {
	case oldTuple == nil:
		b = append(b, "null"...)
	case oldKind == pglogrepl.UpdateMessageTupleTypeKey:
		b = d.appendRow(b, rel, oldTuple, rowOldKey)
	default:
		b = d.appendRow(b, rel, oldTuple, rowOldFull)
	}
	lay.Old[1] = len(b)

	if len(d.unchanged) > 0 {
		b = append(b, `,"unchanged":`...)
		lay.Unchanged[0] = len(b)
		b = append(b, '[')
		b = append(b, d.unchanged...)
		b = append(b, ']')
		lay.Unchanged[1] = len(b)
	}
	d.buf = append(b, '}')
	formats := d.encodeFormats(&rowChange{rel: rel, op: op, newTuple: newTuple, oldTuple: oldTuple, oldKind: oldKind, keyChanged: oldKey != nil,
		env: envParts{env: d.buf, key: d.buf[keyStart:keyEnd], oldKey: oldKey, newRow: d.buf[lay.New[0]:lay.New[1]], oldRow: d.buf[lay.Old[0]:lay.Old[1]]}})
	return d.emit(rel, op, keyStart, keyEnd, oldKey, lay, formats, emit)
}

// tupleBytes is the size of a tuple's values as received.
func tupleBytes(t []*pglogrepl.TupleDataColumn) int {
	n := 0
	for _, c := range t {
		n += len(c.Data) + 16
	}
	return n
}

// appendNoRows appends `,"new":null,"old":null` for an event that
// concerns no single row (a truncate, a schema event, a resync marker, a
// detach, a message) and records where both nulls are in lay.
func appendNoRows(b []byte, lay *change.Layout) []byte {
	b = append(b, `,"new":`...)
	lay.New = [2]int{len(b), len(b) + 4}
	b = append(b, `null,"old":`...)
	lay.Old = [2]int{len(b), len(b) + 4}
	return append(b, "null"...)
}

// appendNoRow appends `"key":null,"new":null,"old":null` for a table-wide
// event and returns where its key is.
func appendNoRow(b []byte, lay *change.Layout) (out []byte, keyStart, keyEnd int) {
	b = append(b, `"key":`...)
	keyStart = len(b)
	b = append(b, "null"...)
	keyEnd = len(b)
	return appendNoRows(b, lay), keyStart, keyEnd
}

// truncateEvent encodes and emits the event for one truncated relation.
func (d *Decoder) truncateEvent(rel *relation, cascade, restartIdentity bool, emit func(change.Event) error) error {
	b := d.appendHead(d.buf[:0], rel, cdc.OpTruncate)
	lay := change.Layout{Cascade: cascade, RestartIdentity: restartIdentity}
	b, keyStart, keyEnd := appendNoRow(b, &lay)
	b = append(b, `,"cascade":`...)
	b = strconv.AppendBool(b, cascade)
	b = append(b, `,"restart_identity":`...)
	b = strconv.AppendBool(b, restartIdentity)
	d.buf = append(b, '}')
	formats := d.encodeFormats(&rowChange{rel: rel, op: cdc.OpTruncate,
		env: envParts{env: d.buf, key: d.buf[keyStart:keyEnd], newRow: d.buf[lay.New[0]:lay.New[1]], oldRow: d.buf[lay.Old[0]:lay.Old[1]]}})
	return d.emit(rel, cdc.OpTruncate, keyStart, keyEnd, nil, lay, formats, emit)
}

// appendHead appends everything up to and including `"op":"…",`.
func (d *Decoder) appendHead(b []byte, rel *relation, op cdc.Op) []byte {
	b = append(b, `{"id":"`...)
	b = cdc.AppendLSN(b, d.commitLSN)
	b = append(b, ':')
	b = strconv.AppendUint(b, d.index, 10)
	b = append(b, `",`...)
	b = append(b, d.txHead...)
	b = append(b, rel.head...)
	b = append(b, `"op":"`...)
	b = append(b, op...)
	return append(b, `",`...)
}

// rowMode says how a tuple's special markers read.
type rowMode uint8

const (
	// rowNew is a new tuple: 'u' is an unchanged TOASTed value, left out
	// and listed in "unchanged"; 'n' is NULL.
	rowNew rowMode = iota
	// rowOldKey is a 'K' old tuple: only replica identity columns carry
	// values, 'n' in any other column means "not part of the key".
	rowOldKey
	// rowOldFull is an 'O' old tuple (REPLICA IDENTITY FULL): 'n' is NULL.
	rowOldFull
)

// appendRow appends a tuple as a JSON object.
func (d *Decoder) appendRow(b []byte, rel *relation, tuple []*pglogrepl.TupleDataColumn, mode rowMode) []byte {
	b = append(b, '{')
	first := true
	for i, v := range tuple {
		col := &rel.cols[i]
		switch v.DataType {
		case pglogrepl.TupleDataTypeToast:
			if mode == rowNew {
				if len(d.unchanged) > 0 {
					d.unchanged = append(d.unchanged, ',')
				}
				d.unchanged = append(d.unchanged, col.quoted...)
			}
			// An old tuple never has unchanged values worth reporting
			// (the server flattens them); leave it out rather than guess.
			continue
		case pglogrepl.TupleDataTypeNull:
			if mode == rowOldKey && !col.identity {
				continue
			}
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, col.name...)
		b = d.appendColumnValue(b, col, v)
	}
	return append(b, '}')
}

// appendKey appends the key object built from tuple, taking a column from
// fallback when tuple has it as an unchanged TOASTed value, or null when the
// relation has no key columns.
func (d *Decoder) appendKey(b []byte, rel *relation, tuple, fallback []*pglogrepl.TupleDataColumn) []byte {
	if len(rel.keyCols) == 0 {
		return append(b, "null"...)
	}
	b = append(b, '{')
	first := true
	for _, i := range rel.keyCols {
		v := tuple[i]
		if v.DataType == pglogrepl.TupleDataTypeToast && fallback != nil {
			v = fallback[i]
		}
		if v.DataType == pglogrepl.TupleDataTypeToast {
			// Unknowable here; the server sends the old key whenever a key
			// column is stored externally, so this does not happen with
			// PostgreSQL's pgoutput.
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		col := &rel.cols[i]
		b = append(b, col.name...)
		b = d.appendColumnValue(b, col, v)
	}
	return append(b, '}')
}

// appendColumnValue appends one value, which tupleColumns has checked to be
// null or text.
func (d *Decoder) appendColumnValue(b []byte, col *column, v *pglogrepl.TupleDataColumn) []byte {
	if v.DataType == pglogrepl.TupleDataTypeNull {
		return append(b, "null"...)
	}
	if col.typ.array {
		out, scratch, ok := appendArray(b, v.Data, col.typ.kind, d.scratch)
		d.scratch = scratch
		if ok {
			return out
		}
		return appendJSONString(b, v.Data)
	}
	return appendValue(b, col.typ.kind, v.Data)
}
