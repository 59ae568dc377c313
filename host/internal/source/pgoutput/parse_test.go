package pgoutput

import (
	"reflect"
	"testing"

	"github.com/jackc/pglogrepl"

	pgt "github.com/walcast/walcast/host/internal/source/pgoutput/pgoutputtest"
)

// Every proper prefix of a message is truncated; Parse must say so instead
// of letting pglogrepl index past the end.
func TestParseTruncated(t *testing.T) {
	var p Parser
	for _, raw := range pgt.OneOfEach() {
		for n := 0; n < len(raw); n++ {
			_, err := Parse(raw[:n])
			_, err2 := p.Parse(raw[:n])
			if (err == nil) != (err2 == nil) {
				t.Errorf("%q: Parse: %v, Parser.Parse: %v", raw[:n], err, err2)
			}
			// A few prefixes are complete messages of their own (a tuple
			// cut after whole columns has the wrong count, which only the
			// decoder can tell), but never the empty one.
			if n == 0 && err == nil {
				t.Errorf("Parse(empty) succeeded")
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
		if msg, err := Parse(raw); err == nil {
			t.Errorf("Parse(%q) = %T, want an error", raw, msg)
		}
		if msg, err := p.Parse(raw); err == nil {
			t.Errorf("Parser.Parse(%q) = %T, want an error", raw, msg)
		}
	}
}

// Parser.Parse decodes row messages into storage it reuses; each message
// must equal what Parse returns for the same bytes, also after the storage
// held other messages.
func TestParserMatchesParse(t *testing.T) {
	var p Parser
	for range 2 {
		for _, raw := range pgt.OneOfEach() {
			want, err := Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			if !sameMessage(got, want) {
				t.Errorf("%q:\nParser.Parse %#v\nParse        %#v", raw, got, want)
			}
		}
	}
}

// sameMessage compares two parsed messages by value, treating empty and
// nil slices the same (pglogrepl allocates an empty slice for a tuple
// without columns and for a zero-length value; Parser reuses or aliases).
func sameMessage(a, b pglogrepl.Message) bool {
	if reflect.TypeOf(a) != reflect.TypeOf(b) {
		return false
	}
	norm := func(t *pglogrepl.TupleData) {
		if t == nil {
			return
		}
		if len(t.Columns) == 0 {
			t.Columns = nil
		}
		for _, c := range t.Columns {
			if len(c.Data) == 0 {
				c.Data = nil
			}
		}
	}
	for _, m := range []pglogrepl.Message{a, b} {
		switch m := m.(type) {
		case *pglogrepl.InsertMessage:
			norm(m.Tuple)
		case *pglogrepl.UpdateMessage:
			norm(m.OldTuple)
			norm(m.NewTuple)
		case *pglogrepl.DeleteMessage:
			norm(m.OldTuple)
		}
	}
	return reflect.DeepEqual(a, b)
}

// FuzzParse holds Parser.Parse to Parse's answers on arbitrary input:
// neither may panic, both refuse the same inputs, and what they accept
// they parse to equal messages.
func FuzzParse(f *testing.F) {
	for _, raw := range pgt.OneOfEach() {
		f.Add(raw)
	}
	f.Add([]byte{'I', 0, 0, 0, 1, 'N', 0, 0})
	f.Add([]byte{'U', 0, 0, 0, 1, 'N', 0, 0})
	var p Parser
	f.Fuzz(func(t *testing.T, data []byte) {
		want, err := Parse(data)
		got, err2 := p.Parse(data)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("Parse: %v, Parser.Parse: %v", err, err2)
		}
		if err == nil && !sameMessage(got, want) {
			t.Fatalf("Parser.Parse %#v\nParse        %#v", got, want)
		}
	})
}
