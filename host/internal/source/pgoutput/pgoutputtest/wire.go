// Package pgoutputtest builds pgoutput messages for tests: as
// pglogrepl.Parse returns them, and encoded as the server sends them.
package pgoutputtest

import (
	"encoding/binary"
	"time"

	"github.com/jackc/pglogrepl"
)

// Col is one column of a Relation message.
type Col struct {
	Name string
	OID  uint32
	Key  bool // part of the replica identity
}

// Relation builds a Relation message; ident is the replica identity
// setting ('d', 'f', 'i' or 'n').
func Relation(id uint32, schema, table string, ident uint8, cols ...Col) *pglogrepl.RelationMessage {
	m := &pglogrepl.RelationMessage{RelationID: id, Namespace: schema, RelationName: table, ReplicaIdentity: ident, ColumnNum: uint16(len(cols))}
	for _, c := range cols {
		var flags uint8
		if c.Key {
			flags = 1
		}
		m.Columns = append(m.Columns, &pglogrepl.RelationMessageColumn{Flags: flags, Name: c.Name, DataType: c.OID, TypeModifier: -1})
	}
	return m
}

type toastMarker struct{}

// Toast stands for pgoutput's unchanged-TOAST marker ('u') in Tuple.
var Toast = toastMarker{}

// Binary stands for a binary-format value ('b') in Tuple.
type Binary []byte

// Tuple builds a tuple: a string is a text value ('t'), nil is NULL ('n'),
// Toast is an unchanged TOASTed value ('u'), a Binary is 'b'.
func Tuple(vals ...any) *pglogrepl.TupleData {
	t := &pglogrepl.TupleData{ColumnNum: uint16(len(vals))}
	for _, v := range vals {
		switch v := v.(type) {
		case nil:
			t.Columns = append(t.Columns, &pglogrepl.TupleDataColumn{DataType: 'n'})
		case toastMarker:
			t.Columns = append(t.Columns, &pglogrepl.TupleDataColumn{DataType: 'u'})
		case string:
			t.Columns = append(t.Columns, &pglogrepl.TupleDataColumn{DataType: 't', Length: uint32(len(v)), Data: []byte(v)})
		case Binary:
			t.Columns = append(t.Columns, &pglogrepl.TupleDataColumn{DataType: 'b', Length: uint32(len(v)), Data: v})
		}
	}
	return t
}

// CommitTime is the commit time Begin gives every transaction.
var CommitTime = time.Date(2026, 11, 30, 10, 0, 0, 123456000, time.UTC)

// Begin builds a Begin message committed at CommitTime.
func Begin(lsn pglogrepl.LSN, xid uint32) *pglogrepl.BeginMessage {
	return &pglogrepl.BeginMessage{FinalLSN: lsn, CommitTime: CommitTime, Xid: xid}
}

// The wire encoding, for parser tests and fuzz seeds. Times are
// microseconds since 2000-01-01, as the server sends them.

// EncodeBegin encodes a Begin message.
func EncodeBegin(lsn uint64, micros int64, xid uint32) []byte {
	b := []byte{'B'}
	b = binary.BigEndian.AppendUint64(b, lsn)
	b = binary.BigEndian.AppendUint64(b, uint64(micros))
	return binary.BigEndian.AppendUint32(b, xid)
}

// EncodeCommit encodes a Commit message.
func EncodeCommit(lsn, end uint64, micros int64) []byte {
	b := []byte{'C', 0}
	b = binary.BigEndian.AppendUint64(b, lsn)
	b = binary.BigEndian.AppendUint64(b, end)
	return binary.BigEndian.AppendUint64(b, uint64(micros))
}

// EncodeRelation encodes a Relation message.
func EncodeRelation(m *pglogrepl.RelationMessage) []byte {
	b := []byte{'R'}
	b = binary.BigEndian.AppendUint32(b, m.RelationID)
	b = append(append(b, m.Namespace...), 0)
	b = append(append(b, m.RelationName...), 0)
	b = append(b, m.ReplicaIdentity)
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.Columns)))
	for _, c := range m.Columns {
		b = append(b, c.Flags)
		b = append(append(b, c.Name...), 0)
		b = binary.BigEndian.AppendUint32(b, c.DataType)
		b = binary.BigEndian.AppendUint32(b, uint32(c.TypeModifier))
	}
	return b
}

func encodeTuple(b []byte, t *pglogrepl.TupleData) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(t.Columns)))
	for _, c := range t.Columns {
		b = append(b, c.DataType)
		if c.DataType == 't' || c.DataType == 'b' {
			b = binary.BigEndian.AppendUint32(b, uint32(len(c.Data)))
			b = append(b, c.Data...)
		}
	}
	return b
}

// EncodeInsert encodes an Insert message.
func EncodeInsert(rel uint32, t *pglogrepl.TupleData) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'I'}, rel)
	return encodeTuple(append(b, 'N'), t)
}

// EncodeUpdate encodes an Update message; old is nil for none, else
// oldKind is 'K' or 'O'.
func EncodeUpdate(rel uint32, oldKind byte, old, new *pglogrepl.TupleData) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'U'}, rel)
	if old != nil {
		b = encodeTuple(append(b, oldKind), old)
	}
	return encodeTuple(append(b, 'N'), new)
}

// EncodeDelete encodes a Delete message; oldKind is 'K' or 'O'.
func EncodeDelete(rel uint32, oldKind byte, old *pglogrepl.TupleData) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'D'}, rel)
	return encodeTuple(append(b, oldKind), old)
}

// EncodeTruncate encodes a Truncate message; option has bit 1 for CASCADE
// and bit 2 for RESTART IDENTITY.
func EncodeTruncate(option byte, rels ...uint32) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'T'}, uint32(len(rels)))
	b = append(b, option)
	for _, r := range rels {
		b = binary.BigEndian.AppendUint32(b, r)
	}
	return b
}

// Orders is the Relation message of a table public.orders(id int8 key,
// status text, total numeric, notes_blob text), replica identity default.
func Orders(id uint32) *pglogrepl.RelationMessage {
	return Relation(id, "public", "orders", 'd',
		Column("id", 20, true),          // int8
		Column("status", 25, false),     // text
		Column("total", 1700, false),    // numeric
		Column("notes_blob", 25, false), // text
	)
}

// OneOfEach is one transaction with a message of every kind protocol
// version 1 sends, encoded as the server sends them: relations 1
// (Orders) and 2 (public.t, an int4[] key, replica identity full).
func OneOfEach() [][]byte {
	return [][]byte{
		EncodeBegin(0x1A2B3C8, 0, 7412),
		EncodeRelation(Orders(1)),
		EncodeRelation(Relation(2, "public", "t", 'f', Column("a", 1007, true))), // int4[]
		{'Y', 0, 0, 0x40, 0x74, 'p', 0, 'm', 'o', 'o', 'd', 0},
		EncodeInsert(1, Tuple("42", "new", "1.00", "blob")),
		EncodeUpdate(1, 'K', Tuple("42", nil, nil, nil), Tuple("43", "paid", nil, Toast)),
		EncodeUpdate(1, 0, nil, Tuple("43", "x", "2", Toast)),
		EncodeUpdate(2, 'O', Tuple("{1}"), Tuple("{1,2}")),
		EncodeDelete(1, 'K', Tuple("43", nil, nil, nil)),
		EncodeDelete(2, 'O', Tuple("{1,2}")),
		EncodeTruncate(1, 1, 2),
		EncodeCommit(0x1A2B3C8, 0x1A2B400, 0),
	}
}

// Column returns a Col; key says it is part of the replica identity.
func Column(name string, oid uint32, key bool) Col { return Col{Name: name, OID: oid, Key: key} }
