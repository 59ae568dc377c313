package decode

import (
	"encoding/json"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/walcast/walcast/host/internal/change"
	pgt "github.com/walcast/walcast/host/internal/source/pgoutput/pgoutputtest"
	"github.com/walcast/walcast/pluginkit/cdc"
)

func markerMessage(t *testing.T, m ResyncMarker) *pglogrepl.LogicalDecodingMessage {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return &pglogrepl.LogicalDecodingMessage{Transactional: true, Prefix: ResyncPrefix, Content: b}
}

// TestResyncMarkers: a resync's begin and end markers of this pipeline
// become resync_begin and resync_end events of their table, with the
// resync's id, the target sinks and ids counted like any other event's;
// another pipeline's markers produce nothing, and a marker with an unknown
// phase is an error.
func TestResyncMarkers(t *testing.T) {
	c := newCollector(t, Options{Pipeline: "p"})
	begin := ResyncMarker{Pipeline: "p", Resync: 7, Phase: ResyncBegin, Sinks: []string{"a"}, Schema: "public", Table: "accts"}
	end := begin
	end.Phase = ResyncEnd
	other := begin
	other.Pipeline = "q"
	c.feed(pgt.Begin(0x1A2B3C8, 9), markerMessage(t, other), markerMessage(t, begin), markerMessage(t, end))
	want := []string{
		`{"id":"0/1A2B3C8:0","commit_lsn":"0/1A2B3C8","xid":9,"commit_time":"2026-11-30T10:00:00.123456Z","schema":"public","table":"accts","op":"resync_begin","key":null,"new":null,"old":null,"resync":7}`,
		`{"id":"0/1A2B3C8:1","commit_lsn":"0/1A2B3C8","xid":9,"commit_time":"2026-11-30T10:00:00.123456Z","schema":"public","table":"accts","op":"resync_end","key":null,"new":null,"old":null,"resync":7}`,
	}
	got := c.payloads()
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d: %v", len(got), len(want), got)
	}
	for i, op := range []cdc.Op{cdc.OpResyncBegin, cdc.OpResyncEnd} {
		if got[i] != want[i] {
			t.Errorf("event %d\n got %s\nwant %s", i, got[i], want[i])
		}
		ev := c.events[i]
		if ev.Op != op || string(ev.Key) != "null" || len(ev.Sinks) != 1 || ev.Sinks[0] != "a" || !ev.Op.TableWide() {
			t.Errorf("event %d: op %s key %s sinks %v", i, ev.Op, ev.Key, ev.Sinks)
		}
	}

	bad := begin
	bad.Phase = "middle"
	d := New(Options{Pipeline: "p"})
	if err := d.Decode(pgt.Begin(0x1A2B3C8, 9), nil); err != nil {
		t.Fatal(err)
	}
	if err := d.Decode(markerMessage(t, bad), func(change.Event) error { return nil }); err == nil {
		t.Fatal("a marker with an unknown phase decoded without an error")
	}
}
