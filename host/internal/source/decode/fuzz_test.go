package decode

import (
	"encoding/binary"
	"encoding/json"
	"slices"
	"testing"

	"github.com/walcast/walcast/host/internal/pg"
	"github.com/walcast/walcast/host/internal/source/pgoutput"
	pgt "github.com/walcast/walcast/host/internal/source/pgoutput/pgoutputtest"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/walcast/walcast/host/internal/change"
)

// fuzzOIDs are the column types the fuzzers pick from.
var fuzzOIDs = []uint32{
	pgtype.TextOID, pgtype.Int4OID, pgtype.Float8OID, pgtype.BoolOID, pgtype.JSONBOID,
	pgtype.ByteaOID, pgtype.TimestampOID, pgtype.TimestamptzOID, pgtype.NumericOID,
}

func FuzzArrayLiteral(f *testing.F) {
	for _, s := range []string{
		"{}", "{1,2,NULL}", "{{1,2},{3,4}}", `{"a b","x\"y",NULL,"NULL"}`, `{"{\"a\": 1}"}`,
		`{"\\x0a0b"}`, `{"2026-11-30 10:00:00+00"}`, "[0:1]={1,2}", "{{{{{{{1}}}}}}}", `{"\`, "{",
	} {
		for i := range fuzzOIDs {
			f.Add(s, uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, text string, k uint8) {
		oid := fuzzOIDs[int(k)%len(fuzzOIDs)]
		elem := lookupType(oid).kind
		out, _, ok := appendArray([]byte("prefix"), []byte(text), elem, nil)
		if string(out[:6]) != "prefix" {
			t.Fatalf("appendArray clobbered its prefix: %q", out)
		}
		if !ok {
			if len(out) != 6 {
				t.Fatalf("failed appendArray left %q behind", out[6:])
			}
			return
		}
		if !json.Valid(out[6:]) {
			t.Fatalf("appendArray(%q) = %s: not valid JSON", text, out[6:])
		}
	})
}

func FuzzTextValue(f *testing.F) {
	for _, s := range []string{
		"42", "-0", "1e+100", "NaN", "t", `{"a": 1}`, `\x0a0b`, "2026-11-30 10:00:00.123456+00",
		"2026-11-30 10:00:00-05:30:15", "0001-01-01 00:00:00+14", "9999-12-31 23:59:59.999999-12",
		"infinity", "a\x00b\xff\u2028", "{1,2}",
	} {
		for i := range fuzzOIDs {
			f.Add(s, uint8(i), false)
			f.Add(s, uint8(i), true)
		}
	}
	f.Fuzz(func(t *testing.T, text string, k uint8, array bool) {
		oid := fuzzOIDs[int(k)%len(fuzzOIDs)]
		d := New(Options{})
		c := column{typ: lookupType(oid)}
		c.typ.array = array
		out := d.appendColumnValue(nil, &c, pgt.Tuple(text).Columns[0])
		if !json.Valid(out) {
			t.Fatalf("value(%d, array %v, %q) = %s: not valid JSON", oid, array, text, out)
		}
	})
}

// FuzzDecode feeds a stream of messages through Parse and Decode. The input
// is a sequence of length-prefixed messages (uint16 length, then the
// message) so that the fuzzer can build transactions with Relation messages
// followed by changes; nothing may panic and every event must be valid JSON.
func FuzzDecode(f *testing.F) {
	rel := pgt.Orders(1)
	stream := func(msgs ...[]byte) []byte {
		var b []byte
		for _, m := range msgs {
			b = binary.BigEndian.AppendUint16(b, uint16(len(m)))
			b = append(b, m...)
		}
		return b
	}
	f.Add(stream(
		pgt.EncodeBegin(0x1A2B3C8, 817_000_000_000_000, 7412),
		pgt.EncodeRelation(rel),
		pgt.EncodeRelation(pgt.Relation(2, "public", "arr", 'f', pgt.Column("a", pgtype.Int4ArrayOID, true), pgt.Column("j", pgtype.JSONBOID, true))),
		pgt.EncodeRelation(pgt.Relation(3, pg.ControlSchema, "checkpoints", 'd', pgt.Column("s", pgtype.TextOID, true))),
		pgt.EncodeInsert(1, pgt.Tuple("42", "new", "1.00", "blob")),
		pgt.EncodeInsert(2, pgt.Tuple("{1,2}", `{"a": 1}`)),
		pgt.EncodeInsert(3, pgt.Tuple("x")),
		pgt.EncodeUpdate(1, 'K', pgt.Tuple("42", nil, nil, nil), pgt.Tuple("43", "paid", nil, pgt.Toast)),
		pgt.EncodeUpdate(1, 0, nil, pgt.Tuple("43", "x", "2", pgt.Toast)),
		pgt.EncodeDelete(1, 'K', pgt.Tuple("43", nil, nil, nil)),
		pgt.EncodeDelete(2, 'O', pgt.Tuple("{1,2}", "null")),
		pgt.EncodeTruncate(3, 1, 2, 3),
		pgt.EncodeCommit(0x1A2B3C8, 0x1A2B400, 817_000_000_000_000),
	))
	f.Add(stream([]byte{}, []byte("B"), pgt.EncodeInsert(9, pgt.Tuple("1"))))
	f.Fuzz(func(t *testing.T, data []byte) {
		// The same stream through Parse and through a reusing Parser must
		// decode to the same events.
		opts := Options{PrimaryKey: func(string, string) ([]string, error) { return []string{"id"}, nil }}
		d, d2 := New(opts), New(opts)
		var p pgoutput.Parser
		var got, got2 []string
		emit := func(ev change.Event) error {
			if !json.Valid(ev.Payload) || !json.Valid(ev.Key) {
				t.Fatalf("invalid JSON event: key %s payload %s", ev.Key, ev.Payload)
			}
			got = append(got, string(ev.Payload))
			return nil
		}
		emit2 := func(ev change.Event) error { got2 = append(got2, string(ev.Payload)); return nil }
		for len(data) >= 2 {
			n := int(binary.BigEndian.Uint16(data))
			data = data[2:]
			if n > len(data) {
				n = len(data)
			}
			msg, err := pgoutput.Parse(data[:n])
			msg2, err2 := p.Parse(data[:n])
			data = data[n:]
			if (err == nil) != (err2 == nil) {
				t.Fatalf("Parse: %v, Parser.Parse: %v", err, err2)
			}
			if err != nil {
				continue
			}
			_ = d.Decode(msg, emit)
			_ = d2.Decode(msg2, emit2)
		}
		if !slices.Equal(got, got2) {
			t.Fatalf("Parse gave\n%q\nParser.Parse gave\n%q", got, got2)
		}
	})
}
