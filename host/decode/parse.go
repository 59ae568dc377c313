package decode

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// Parse parses one pgoutput protocol version 1 message (the WALData of an
// XLogData message) with pglogrepl.Parse, after checking that its framing is
// complete.
//
// pglogrepl.Parse trusts every length in the message: a truncated or corrupt
// message makes it index past the end of its input (a panic) or allocate
// whatever a length field claims (up to 4 GiB per column). The host must
// not die on one bad message without flushing its checkpoints, so Parse
// walks the message first and returns an error instead.
func Parse(data []byte) (pglogrepl.Message, error) {
	if err := checkFraming(data); err != nil {
		return nil, fmt.Errorf("parse pgoutput message: %w", err)
	}
	msg, err := pglogrepl.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("parse pgoutput %s message: %w", pglogrepl.MessageType(data[0]), err)
	}
	return msg, nil
}

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
