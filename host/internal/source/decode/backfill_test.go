package decode

import (
	"encoding/json"
	"testing"

	pgt "github.com/walcast/walcast/host/internal/source/pgoutput/pgoutputtest"

	"github.com/jackc/pglogrepl"

	"github.com/walcast/walcast/pluginkit/cdc"
)

func chunkMessage(t *testing.T, c BackfillChunk) *pglogrepl.LogicalDecodingMessage {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return &pglogrepl.LogicalDecodingMessage{Transactional: true, Prefix: BackfillPrefix, Content: b}
}

// packedMessage is c as the runner writes it: header, newline, rows as
// length-prefixed values.
func packedMessage(t *testing.T, c BackfillChunk) *pglogrepl.LogicalDecodingMessage {
	t.Helper()
	rows := c.Rows
	c.Rows = nil
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	for _, row := range rows {
		for _, v := range row {
			if v == nil {
				b = AppendBackfillValue(b, nil)
			} else {
				b = AppendBackfillValue(b, []byte(*v))
			}
		}
	}
	return &pglogrepl.LogicalDecodingMessage{Transactional: true, Prefix: BackfillPrefix, Content: b}
}

func strp(s string) *string { return &s }

// TestBackfillChunk: a chunk of this pipeline becomes one read event per
// row, key built in the chunk's key order, with the target sinks; chunks
// of other pipelines and other messages produce nothing.
func TestBackfillChunk(t *testing.T) {
	for name, encode := range map[string]func(*testing.T, BackfillChunk) *pglogrepl.LogicalDecodingMessage{
		"packed": packedMessage, "json (earlier versions)": chunkMessage,
	} {
		t.Run(name, func(t *testing.T) {
			c := newCollector(t, Options{Pipeline: "p"})
			chunk := BackfillChunk{
				Pipeline: "p", Backfill: 3, Chunk: 1, Sinks: []string{"a"}, Schema: "public", Table: "accts",
				Columns: []BackfillColumn{{Name: "region", Type: 25}, {Name: "id", Type: 23}, {Name: "tags", Type: 1009}, {Name: "note", Type: 25}},
				Key:     []int{0, 1},
				Rows:    [][]*string{{strp("eu"), strp("1"), strp(`{x,"y z"}`), nil}, {strp("us"), strp("2"), strp("{}"), strp(`q"`)}},
			}
			other := chunk
			other.Pipeline = "q"
			c.feed(pgt.Begin(0x1A2B3C8, 9), encode(t, chunk), encode(t, other),
				&pglogrepl.LogicalDecodingMessage{Transactional: true, Prefix: "someone.else", Content: []byte("x")})
			want := []string{
				`{"id":"0/1A2B3C8:0","commit_lsn":"0/1A2B3C8","xid":9,"commit_time":"2026-11-30T10:00:00.123456Z","schema":"public","table":"accts","op":"read","key":{"region":"eu","id":1},"new":{"region":"eu","id":1,"tags":["x","y z"],"note":null},"old":null}`,
				`{"id":"0/1A2B3C8:1","commit_lsn":"0/1A2B3C8","xid":9,"commit_time":"2026-11-30T10:00:00.123456Z","schema":"public","table":"accts","op":"read","key":{"region":"us","id":2},"new":{"region":"us","id":2,"tags":[],"note":"q\""},"old":null}`,
			}
			got := c.payloads()
			if len(got) != len(want) {
				t.Fatalf("got %d events, want %d: %v", len(got), len(want), got)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("event %d\n got %s\nwant %s", i, got[i], want[i])
				}
				ev := c.events[i]
				if ev.Op != cdc.OpRead || len(ev.Sinks) != 1 || ev.Sinks[0] != "a" {
					t.Errorf("event %d: op %s sinks %v", i, ev.Op, ev.Sinks)
				}
			}
		})
	}
}
