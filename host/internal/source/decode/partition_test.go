package decode

import (
	"encoding/json"
	"testing"

	"github.com/jackc/pglogrepl"

	pgt "github.com/walcast/walcast/host/internal/source/pgoutput/pgoutputtest"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// TestPartitionRows: the keys of a partition's rows, as walcast's
// partition triggers write them, become one delete of the table per row
// at the message's place, keyed like a live delete, when the pipeline
// asks for deletes (on_detach = "delete"); nothing otherwise, and nothing
// for another pipeline or a table not listed.
func TestPartitionRows(t *testing.T) {
	msg := func(p PartitionRows) *pglogrepl.LogicalDecodingMessage {
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return &pglogrepl.LogicalDecodingMessage{Transactional: true, Prefix: PartitionPrefix, Content: b}
	}
	rows := PartitionRows{
		BackfillChunk: BackfillChunk{Pipeline: "p", Schema: "public", Table: "items",
			Columns: []BackfillColumn{{Name: "region", Type: 25}, {Name: "id", Type: 23}}, Key: []int{0, 1},
			Rows: [][]*string{{strp("eu"), strp("1")}, {strp("us"), strp("2")}}},
		Partition: "public.items_p1", Command: "detach",
	}
	other, unlisted := rows, rows
	other.Pipeline = "q"
	unlisted.Table = "other"
	c := newCollector(t, Options{Pipeline: "p", PartitionDeletes: true, Tables: map[string]bool{"public.items": true}})
	c.feed(pgt.Begin(0x1A2B3C8, 9), msg(rows), msg(other), msg(unlisted))
	want := []string{
		`{"id":"0/1A2B3C8:0","commit_lsn":"0/1A2B3C8","xid":9,"commit_time":"2026-11-30T10:00:00.123456Z","schema":"public","table":"items","op":"delete","key":{"region":"eu","id":1},"new":null,"old":{"region":"eu","id":1}}`,
		`{"id":"0/1A2B3C8:1","commit_lsn":"0/1A2B3C8","xid":9,"commit_time":"2026-11-30T10:00:00.123456Z","schema":"public","table":"items","op":"delete","key":{"region":"us","id":2},"new":null,"old":{"region":"us","id":2}}`,
	}
	got := c.payloads()
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d: %v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] || c.events[i].Op != cdc.OpDelete {
			t.Errorf("event %d\n got %s\nwant %s", i, got[i], want[i])
		}
	}

	off := newCollector(t, Options{Pipeline: "p"})
	off.feed(pgt.Begin(0x1A2B3C8, 9), msg(rows))
	if len(off.events) != 0 {
		t.Fatalf("on_detach = ignore: %d events, want none: %v", len(off.events), off.payloads())
	}
}

// TestPartitionDetachEvent: under on_detach = "event" a DETACH's message
// becomes ONE detach event of the table at the message's place (the
// partition named, the rows counted, key null, a barrier for its table),
// between the changes around it; a TRUNCATE's message still gives a delete
// per row.
func TestPartitionDetachEvent(t *testing.T) {
	msg := func(p PartitionRows) *pglogrepl.LogicalDecodingMessage {
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return &pglogrepl.LogicalDecodingMessage{Transactional: true, Prefix: PartitionPrefix, Content: b}
	}
	detach := PartitionRows{
		BackfillChunk: BackfillChunk{Pipeline: "p", Schema: "public", Table: "items",
			Columns: []BackfillColumn{{Name: "region", Type: 25}, {Name: "id", Type: 23}}, Key: []int{0, 1},
			Rows: [][]*string{{strp("eu"), strp("1")}, {strp("eu"), strp("2")}, {strp("eu"), strp("3")}}},
		Partition: "public.items_eu", Command: PartitionDetach,
	}
	truncate := detach
	truncate.Command, truncate.Partition = PartitionTruncate, "public.items_us"
	truncate.Rows = [][]*string{{strp("us"), strp("4")}}

	c := newCollector(t, Options{Pipeline: "p", PartitionDeletes: true, PartitionDetachEvents: true})
	c.feed(pgt.Begin(0x1A2B3C8, 9), msg(detach), msg(truncate))
	want := []string{
		`{"id":"0/1A2B3C8:0","commit_lsn":"0/1A2B3C8","xid":9,"commit_time":"2026-11-30T10:00:00.123456Z","schema":"public","table":"items","op":"detach","key":null,"new":null,"old":null,"partition":"public.items_eu","rows":3}`,
		`{"id":"0/1A2B3C8:1","commit_lsn":"0/1A2B3C8","xid":9,"commit_time":"2026-11-30T10:00:00.123456Z","schema":"public","table":"items","op":"delete","key":{"region":"us","id":4},"new":null,"old":{"region":"us","id":4}}`,
	}
	got := c.payloads()
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d: %v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d\n got %s\nwant %s", i, got[i], want[i])
		}
	}
	ev := c.events[0]
	if ev.Op != cdc.OpDetach || !ev.Op.TableWide() || string(ev.Key) != "null" || ev.Schema != "public" || ev.Table != "items" {
		t.Errorf("detach event: op %q (table-wide %v), key %s, table %s.%s; want a table-wide detach of public.items keyed null",
			ev.Op, ev.Op.TableWide(), ev.Key, ev.Schema, ev.Table)
	}

	// The same message under on_detach = "delete" gives the deletes.
	del := newCollector(t, Options{Pipeline: "p", PartitionDeletes: true})
	del.feed(pgt.Begin(0x1A2B3C8, 9), msg(detach))
	if len(del.events) != 3 || del.events[0].Op != cdc.OpDelete {
		t.Fatalf("on_detach = delete: %v, want 3 deletes", del.payloads())
	}
}
