package decode

import (
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"
)

// wireStream is one transaction of every message kind, as the server sends it.
func wireStream() [][]byte {
	return [][]byte{
		wireBegin(0x1A2B3C8, 0, 7412),
		wireRelation(orders(1)),
		wireRelation(relMsg(2, "public", "t", 'f', col{"a", pgtype.Int4ArrayOID, true})),
		{'Y', 0, 0, 0x40, 0x74, 'p', 0, 'm', 'o', 'o', 'd', 0},
		wireInsert(1, tup("42", "new", "1.00", "blob")),
		wireUpdate(1, 'K', tup("42", nil, nil, nil), tup("43", "paid", nil, toast)),
		wireUpdate(1, 0, nil, tup("43", "x", "2", toast)),
		wireUpdate(2, 'O', tup("{1}"), tup("{1,2}")),
		wireDelete(1, 'K', tup("43", nil, nil, nil)),
		wireDelete(2, 'O', tup("{1,2}")),
		wireTruncate(1, 1, 2),
		wireCommit(0x1A2B3C8, 0x1A2B400, 0),
	}
}

func TestParseRoundTrip(t *testing.T) {
	c := newCollector(t, Options{})
	var types []pglogrepl.MessageType
	for _, raw := range wireStream() {
		msg, err := referenceParse(raw)
		if err != nil {
			t.Fatalf("referenceParse(%q): %v", raw, err)
		}
		types = append(types, msg.Type())
		c.feed(msg)
	}
	if len(c.events) != 8 {
		t.Fatalf("got %d events: %q", len(c.events), c.payloads())
	}
	if got := string(c.events[1].Payload); got != `{"id":"0/1A2B3C8:1","commit_lsn":"0/1A2B3C8","xid":7412,"commit_time":"2000-01-01T00:00:00.000000Z","schema":"public","table":"orders","op":"update","key":{"id":43},"new":{"id":43,"status":"paid","total":null},"old":{"id":42},"unchanged":["notes_blob"]}` {
		t.Errorf("update = %s", got)
	}
	if got := string(c.events[3].Payload); !strings.HasSuffix(got, `"key":{"a":[1,2]},"new":{"a":[1,2]},"old":{"a":[1]}}`) {
		t.Errorf("full update = %s", got)
	}
	if c.d.InTransaction() {
		t.Error("still in a transaction after Commit")
	}
}

// Every proper prefix of a message is truncated; Parse must say so instead
// of letting pglogrepl index past the end.
func TestParseTruncated(t *testing.T) {
	for _, raw := range wireStream() {
		for n := 0; n < len(raw); n++ {
			if _, err := referenceParse(raw[:n]); err == nil {
				// A few prefixes are complete messages of their own (a tuple
				// cut after whole columns has the wrong count, which only
				// Decode can tell), but never the ones cut inside a field.
				if n == 0 {
					t.Errorf("referenceParse(empty) succeeded")
				}
			}
		}
	}
	for _, raw := range [][]byte{
		{'I', 0, 0, 0, 1, 'N', 0, 1, 't', 0xff, 0xff, 0xff, 0xff},        // 4 GiB value
		{'T', 0xff, 0xff, 0xff, 0xff, 0},                                 // 4 G relations
		{'M', 0, 0, 0, 0, 0, 0, 0, 0, 0, 'p', 0, 0xff, 0xff, 0xff, 0xff}, // 4 GiB content
		{'U', 0, 0, 0, 1, 'K', 0, 0, 'X', 0, 0},                          // old tuple not followed by 'N'
		{'S', 0, 0, 0, 1, 1},                                             // stream start: not protocol 1
	} {
		if msg, err := referenceParse(raw); err == nil {
			t.Errorf("referenceParse(%q) = %T, want an error", raw, msg)
		}
	}
}

// Parser.Parse decodes row messages into reused storage; what it returns
// must decode to the same events as pglogrepl's own parse, message after
// message with the storage being reused.
func TestParserMatchesParse(t *testing.T) {
	a, b := newCollector(t, Options{}), newCollector(t, Options{})
	var p Parser
	for range 2 {
		for _, raw := range wireStream() {
			m1, err := referenceParse(raw)
			if err != nil {
				t.Fatal(err)
			}
			m2, err := p.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			a.feed(m1)
			b.feed(m2)
		}
	}
	if got, want := b.payloads(), a.payloads(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Parser:\n%s\nParse:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
