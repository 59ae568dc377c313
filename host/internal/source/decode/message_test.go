package decode

import (
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/host/internal/pg"
	pgt "github.com/walcast/walcast/host/internal/source/pgoutput/pgoutputtest"
	"github.com/walcast/walcast/pluginkit/cdc"
)

func appMessage(lsn pglogrepl.LSN, transactional bool, prefix, content string) *pglogrepl.LogicalDecodingMessage {
	return &pglogrepl.LogicalDecodingMessage{LSN: lsn, Transactional: transactional, Prefix: prefix, Content: []byte(content)}
}

// TestMessageEvents: a selected message becomes a message event with the
// next index of its transaction (JSON content compacted, anything else
// base64); other prefixes, and walcast's own, take no index; a
// non-transactional one gets the id of the byte before its LSN, which a
// transaction committing at that LSN never has.
func TestMessageEvents(t *testing.T) {
	c := newCollector(t, Options{MessagePrefixes: []string{"app."}})
	c.feed(
		pgt.Begin(0x1A2B3C8, 9),
		appMessage(0x1A2B300, true, "other", `"skipped"`),
		appMessage(0x1A2B340, true, "app.orders", "{\"order\": 1,\n \"ok\": true}"),
		appMessage(0x1A2B380, true, "app.bin", "\x00\xff"),
		&pglogrepl.CommitMessage{CommitLSN: 0x1A2B3C8, TransactionEndLSN: 0x1A2B3F0},
		appMessage(0x1A2B420, false, "app.audit", `[1, 2]`),
		pgt.Begin(0x1A2B420, 10),
		appMessage(0x1A2B410, true, "app.x", `1`),
		&pglogrepl.CommitMessage{CommitLSN: 0x1A2B420, TransactionEndLSN: 0x1A2B450},
	)
	head := `"commit_lsn":"0/1A2B3C8","xid":9,"commit_time":"2026-11-30T10:00:00.123456Z","schema":null,"table":null,"op":"message",`
	want := []string{
		`{"id":"0/1A2B3C8:0",` + head + `"key":{"prefix":"app.orders"},"new":null,"old":null,"prefix":"app.orders","transactional":true,"lsn":"0/1A2B340","content_base64":false,"content":{"order":1,"ok":true}}`,
		`{"id":"0/1A2B3C8:1",` + head + `"key":{"prefix":"app.bin"},"new":null,"old":null,"prefix":"app.bin","transactional":true,"lsn":"0/1A2B380","content_base64":true,"content":"AP8="}`,
		`{"id":"0/1A2B41F:0","commit_lsn":null,"xid":null,"commit_time":null,"schema":null,"table":null,"op":"message","key":{"prefix":"app.audit"},"new":null,"old":null,"prefix":"app.audit","transactional":false,"lsn":"0/1A2B420","content_base64":false,"content":[1,2]}`,
		`{"id":"0/1A2B420:0","commit_lsn":"0/1A2B420","xid":10,"commit_time":"2026-11-30T10:00:00.123456Z","schema":null,"table":null,"op":"message","key":{"prefix":"app.x"},"new":null,"old":null,"prefix":"app.x","transactional":true,"lsn":"0/1A2B410","content_base64":false,"content":1}`,
	}
	got := c.payloads()
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("event %d\n got %s\nwant %s", i, got[i], want[i])
		}
		ev := c.events[i]
		if ev.Op != cdc.OpMessage || ev.Op.TableWide() || ev.Schema != "" || ev.Table != "" || ev.Sinks != nil || ev.Formats != nil {
			t.Errorf("event %d: op %s schema %q table %q sinks %v formats %v", i, ev.Op, ev.Schema, ev.Table, ev.Sinks, ev.Formats)
		}
	}
	// The non-transactional message sorts between the transactions around
	// it, and never collides with the one committing at its LSN.
	if !(c.events[1].ID.Compare(c.events[2].ID) < 0 && c.events[2].ID.Compare(c.events[3].ID) < 0) {
		t.Errorf("ids out of stream order: %s %s %s", c.events[1].ID, c.events[2].ID, c.events[3].ID)
	}
}

// TestMessagePrefixesStayInternal: walcast's own messages never become
// message events, even for a decoder told to take every prefix; every
// prefix walcast writes is covered by pg.MessagePrefix, which the
// configuration refuses to overlap.
func TestMessagePrefixesStayInternal(t *testing.T) {
	for _, p := range []string{BackfillPrefix, ResyncPrefix, VanishedPrefix, DDLPrefix, PartitionPrefix} {
		if !strings.HasPrefix(p, pg.MessagePrefix) {
			t.Errorf("internal prefix %q does not start with pg.MessagePrefix %q", p, pg.MessagePrefix)
		}
	}
	d := New(Options{MessagePrefixes: []string{"walcast", ""}, Pipeline: "p"})
	if err := d.Decode(pgt.Begin(0x100, 1), nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"walcast.app", "walcast.backfill.x"} {
		err := d.Decode(appMessage(0xF0, true, p, `{}`), func(ev change.Event) error {
			t.Errorf("message %q became event %s", p, ev.Payload)
			return nil
		})
		if err != nil {
			t.Errorf("message %q: %v", p, err)
		}
	}
	for _, tc := range []struct {
		prefix string
		ok     bool
	}{{"app.", true}, {"walcastle", true}, {"", false}, {"wal", false}, {"walcast", false}, {"walcast.", false}, {"walcast.mine", false}} {
		if problem := pg.CheckMessagePrefix(tc.prefix); (problem == "") != tc.ok {
			t.Errorf("CheckMessagePrefix(%q) = %q, want ok=%v", tc.prefix, problem, tc.ok)
		}
	}
}

// TestMessageOutsideItsPlace: a transactional message outside a
// transaction, or a non-transactional one inside, is a broken stream.
func TestMessageOutsideItsPlace(t *testing.T) {
	d := New(Options{MessagePrefixes: []string{"app."}})
	emit := func(change.Event) error { return nil }
	if err := d.Decode(appMessage(0x10, true, "app.x", "1"), emit); err == nil {
		t.Error("a transactional message outside a transaction decoded")
	}
	if err := d.Decode(pgt.Begin(0x100, 1), nil); err != nil {
		t.Fatal(err)
	}
	if err := d.Decode(appMessage(0x20, false, "app.x", "1"), emit); err == nil {
		t.Error("a non-transactional message inside a transaction decoded")
	}
}
