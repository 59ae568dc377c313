package pgoutput

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
)

var errTruncated = errors.New("message truncated")

// frame is a cursor over a message being checked.
type frame struct {
	b   []byte
	err error
}

func (f *frame) skip(n int) {
	if f.err != nil {
		return
	}
	if n < 0 || len(f.b) < n {
		f.err = errTruncated
		return
	}
	f.b = f.b[n:]
}

func (f *frame) byte() byte {
	if f.err != nil || len(f.b) < 1 {
		f.err = errTruncated
		return 0
	}
	c := f.b[0]
	f.b = f.b[1:]
	return c
}

func (f *frame) uint16() int {
	if f.err != nil || len(f.b) < 2 {
		f.err = errTruncated
		return 0
	}
	v := binary.BigEndian.Uint16(f.b)
	f.b = f.b[2:]
	return int(v)
}

func (f *frame) uint32() uint64 {
	if f.err != nil || len(f.b) < 4 {
		f.err = errTruncated
		return 0
	}
	v := binary.BigEndian.Uint32(f.b)
	f.b = f.b[4:]
	return uint64(v)
}

func (f *frame) cstring() {
	if f.err != nil {
		return
	}
	i := bytes.IndexByte(f.b, 0)
	if i < 0 {
		f.err = errors.New("string not terminated")
		return
	}
	f.b = f.b[i+1:]
}

// tuple checks a TupleData: column count, then per column a kind byte and,
// for text and binary values, a length and that many bytes.
func (f *frame) tuple() {
	n := f.uint16()
	for i := 0; i < n && f.err == nil; i++ {
		switch k := f.byte(); k {
		case pglogrepl.TupleDataTypeNull, pglogrepl.TupleDataTypeToast:
		case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeBinary:
			l := f.uint32()
			if f.err == nil && uint64(len(f.b)) < l {
				f.err = errTruncated
			}
			f.skip(int(l))
		default:
			if f.err == nil {
				f.err = fmt.Errorf("tuple column %d: unknown kind %q", i, k)
			}
		}
	}
}

// checkFraming reports whether data is a complete message of a type
// pglogrepl.Parse understands for protocol version 1.
func checkFraming(data []byte) error {
	if len(data) == 0 {
		return errors.New("empty message")
	}
	typ := pglogrepl.MessageType(data[0])
	f := frame{b: data[1:]}
	switch typ {
	case pglogrepl.MessageTypeBegin:
		f.skip(8 + 8 + 4) // final LSN, commit time, xid
	case pglogrepl.MessageTypeCommit:
		f.skip(1 + 8 + 8 + 8) // flags, commit LSN, end LSN, commit time
	case pglogrepl.MessageTypeOrigin:
		f.skip(8)
		f.cstring()
	case pglogrepl.MessageTypeRelation:
		f.skip(4)
		f.cstring()
		f.cstring()
		f.skip(1)
		n := f.uint16()
		for i := 0; i < n && f.err == nil; i++ {
			f.skip(1)
			f.cstring()
			f.skip(4 + 4)
		}
	case pglogrepl.MessageTypeType:
		f.skip(4)
		f.cstring()
		f.cstring()
	case pglogrepl.MessageTypeInsert:
		f.skip(4)
		if c := f.byte(); f.err == nil && c != 'N' {
			return fmt.Errorf("insert: tuple type %q, want 'N'", c)
		}
		f.tuple()
	case pglogrepl.MessageTypeUpdate:
		f.skip(4)
		switch c := f.byte(); {
		case f.err != nil:
		case c == 'K' || c == 'O':
			f.tuple()
			if c := f.byte(); f.err == nil && c != 'N' {
				return fmt.Errorf("update: tuple type %q after the old tuple, want 'N'", c)
			}
			f.tuple()
		case c == 'N':
			f.tuple()
		default:
			return fmt.Errorf("update: tuple type %q, want 'K', 'O' or 'N'", c)
		}
	case pglogrepl.MessageTypeDelete:
		f.skip(4)
		if c := f.byte(); f.err == nil && c != 'K' && c != 'O' {
			return fmt.Errorf("delete: tuple type %q, want 'K' or 'O'", c)
		}
		f.tuple()
	case pglogrepl.MessageTypeTruncate:
		n := f.uint32()
		f.skip(1)
		if f.err == nil && uint64(len(f.b)) < 4*n {
			f.err = errTruncated
		}
	case pglogrepl.MessageTypeMessage:
		f.skip(1 + 8)
		f.cstring()
		l := f.uint32()
		if f.err == nil && uint64(len(f.b)) < l {
			f.err = errTruncated
		}
	default:
		return fmt.Errorf("unsupported message type %q", byte(typ))
	}
	if f.err != nil {
		return fmt.Errorf("%s: %w", typ, f.err)
	}
	return nil
}

// Parser parses pgoutput messages like Parse, but decodes the messages
// that carry rows (Insert, Update, Delete) without allocating: it reuses
// its own message structs and the column values alias data. Such a message
// is valid until the next call to Parse and only while data is unchanged —
// which is how the capture loop uses it: decode, encode the envelope (a
// copy), then read the next message. Other messages are parsed by
// pglogrepl.Parse and are not reused. A Parser is not safe for concurrent
// use.
type Parser struct {
	ins     pglogrepl.InsertMessage
	upd     pglogrepl.UpdateMessage
	del     pglogrepl.DeleteMessage
	tuples  [2]pglogrepl.TupleData
	cols    [2][]pglogrepl.TupleDataColumn
	colPtrs [2][]*pglogrepl.TupleDataColumn
	// typed is set once ins, upd and del carry their message type (an
	// unexported field only pglogrepl.Parse can set), so that Type()
	// answers for them as for any parsed message.
	typed bool
}

// Parse parses one pgoutput protocol version 1 message (the WALData of an
// XLogData message), after checking that its framing is complete.
//
// pglogrepl.Parse trusts every length in the message: a truncated or corrupt
// message makes it index past the end of its input (a panic) or allocate
// whatever a length field claims (up to 4 GiB per column). The host must
// not die on one bad message without flushing its checkpoints, so Parse
// walks the message first and returns an error instead.
func (p *Parser) Parse(data []byte) (pglogrepl.Message, error) {
	if err := checkFraming(data); err != nil {
		return nil, fmt.Errorf("parse pgoutput message: %w", err)
	}
	if !p.typed {
		p.setTypes()
	}
	switch pglogrepl.MessageType(data[0]) {
	// pglogrepl.Parse refuses an insert shorter than 8 bytes and an
	// update shorter than 6 after the type (tuples without columns);
	// those go to it so that both answer the same.
	case pglogrepl.MessageTypeInsert:
		if len(data) < 9 {
			break
		}
		// 'I', relation id, 'N', tuple.
		p.ins.RelationID = binary.BigEndian.Uint32(data[1:])
		p.ins.Tuple = p.tuple(0, data[6:])
		return &p.ins, nil
	case pglogrepl.MessageTypeUpdate:
		if len(data) < 7 {
			break
		}
		// 'U', relation id, ['K' | 'O', tuple], 'N', tuple.
		m := &p.upd
		m.RelationID = binary.BigEndian.Uint32(data[1:])
		m.OldTupleType, m.OldTuple = pglogrepl.UpdateMessageTupleTypeNone, nil
		rest := data[5:]
		if c := rest[0]; c == 'K' || c == 'O' {
			m.OldTupleType = c
			m.OldTuple = p.tuple(1, rest[1:])
			rest = rest[1+tupleLen(rest[1:]):]
		}
		m.NewTuple = p.tuple(0, rest[1:])
		return m, nil
	case pglogrepl.MessageTypeDelete:
		// 'D', relation id, 'K' | 'O', tuple.
		m := &p.del
		m.RelationID = binary.BigEndian.Uint32(data[1:])
		m.OldTupleType = data[5]
		m.OldTuple = p.tuple(1, data[6:])
		return m, nil
	}
	return parse(data)
}

// Parse parses one pgoutput protocol version 1 message into messages of its
// own, which stay valid after data changes: pglogrepl.Parse behind the same
// framing check as Parser.Parse. It is the reference Parser's fast path
// must agree with.
func Parse(data []byte) (pglogrepl.Message, error) {
	if err := checkFraming(data); err != nil {
		return nil, fmt.Errorf("parse pgoutput message: %w", err)
	}
	return parse(data)
}

// parse is pglogrepl.Parse on a message whose framing is checked.
func parse(data []byte) (pglogrepl.Message, error) {
	msg, err := pglogrepl.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("parse pgoutput %s message: %w", pglogrepl.MessageType(data[0]), err)
	}
	return msg, nil
}

// setTypes has pglogrepl parse one tiny message of each reused kind and
// keeps the result, type included.
func (p *Parser) setTypes() {
	one := []byte{0, 0, 0, 0, 'N', 0, 1, 'n'} // relation 0, a tuple of one NULL
	for _, typ := range []byte{'I', 'U', 'D'} {
		raw := append([]byte{typ}, one...)
		if typ == 'D' {
			raw[5] = 'K'
		}
		msg, err := pglogrepl.Parse(raw)
		if err != nil {
			continue // never: the messages are well formed; Type() then reads 0
		}
		switch m := msg.(type) {
		case *pglogrepl.InsertMessage:
			p.ins = *m
		case *pglogrepl.UpdateMessage:
			p.upd = *m
		case *pglogrepl.DeleteMessage:
			p.del = *m
		}
	}
	p.typed = true
}

// tuple decodes the TupleData at the start of b (framing already checked)
// into slot i of the parser's storage.
func (p *Parser) tuple(i int, b []byte) *pglogrepl.TupleData {
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	if cap(p.cols[i]) < n {
		p.cols[i] = make([]pglogrepl.TupleDataColumn, n)
		p.colPtrs[i] = make([]*pglogrepl.TupleDataColumn, n)
		for j := range p.colPtrs[i] {
			p.colPtrs[i][j] = &p.cols[i][j]
		}
	}
	cols := p.cols[i][:n]
	for j := range cols {
		c := &cols[j]
		c.DataType = b[0]
		b = b[1:]
		switch c.DataType {
		case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeBinary:
			l := binary.BigEndian.Uint32(b)
			c.Length = l
			c.Data = b[4 : 4+l : 4+l]
			b = b[4+l:]
		default:
			c.Length, c.Data = 0, nil
		}
	}
	t := &p.tuples[i]
	t.ColumnNum = uint16(n)
	t.Columns = p.colPtrs[i][:n]
	return t
}

// tupleLen is the length in bytes of the TupleData at the start of b
// (framing already checked).
func tupleLen(b []byte) int {
	n := int(binary.BigEndian.Uint16(b))
	off := 2
	for range n {
		k := b[off]
		off++
		if k == pglogrepl.TupleDataTypeText || k == pglogrepl.TupleDataTypeBinary {
			off += 4 + int(binary.BigEndian.Uint32(b[off:]))
		}
	}
	return off
}
