package decode

import (
	"strings"
	"testing"

	"github.com/walcast/walcast/host/internal/source/pgoutput"
	pgt "github.com/walcast/walcast/host/internal/source/pgoutput/pgoutputtest"

	"github.com/jackc/pglogrepl"
)

// Wire messages through pgoutput's parsers into the decoder.

func TestParseRoundTrip(t *testing.T) {
	c := newCollector(t, Options{})
	var types []pglogrepl.MessageType
	for _, raw := range pgt.OneOfEach() {
		msg, err := pgoutput.Parse(raw)
		if err != nil {
			t.Fatalf("pgoutput.Parse(%q): %v", raw, err)
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

// Parser.Parse decodes row messages into reused storage; what it returns
// must decode to the same events as pglogrepl's own parse, message after
// message with the storage being reused.
func TestParserMatchesParse(t *testing.T) {
	a, b := newCollector(t, Options{}), newCollector(t, Options{})
	var p pgoutput.Parser
	for range 2 {
		for _, raw := range pgt.OneOfEach() {
			m1, err := pgoutput.Parse(raw)
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
