package decode

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/walcast/walcast/host/internal/pg"
	pgt "github.com/walcast/walcast/host/internal/source/pgoutput/pgoutputtest"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// orders is the relation of the README's envelope example: default replica
// identity on the primary key id.
const head = `"commit_lsn":"0/1A2B3C8","xid":7412,"commit_time":"2026-11-30T10:00:00.123456Z","schema":"public","table":"orders",`

func TestDesignExample(t *testing.T) {
	c := newCollector(t, Options{})
	c.feed(pgt.Begin(0x1A2B3C8, 7412), pgt.Orders(16400), &pglogrepl.UpdateMessage{
		RelationID:   16400,
		OldTupleType: 'K',
		OldTuple:     pgt.Tuple("42", nil, nil, nil),
		NewTuple:     pgt.Tuple("42", "paid", "19.90", pgt.Toast),
	})
	want := `{"id":"0/1A2B3C8:0","commit_lsn":"0/1A2B3C8","xid":7412,"commit_time":"2026-11-30T10:00:00.123456Z","schema":"public","table":"orders","op":"update","key":{"id":42},"new":{"id":42,"status":"paid","total":"19.90"},"old":{"id":42},"unchanged":["notes_blob"]}`
	if len(c.events) != 1 {
		t.Fatalf("got %d events, want 1", len(c.events))
	}
	ev := c.events[0]
	if got := string(ev.Payload); got != want {
		t.Errorf("payload\n got %s\nwant %s", got, want)
	}
	wantEv := cdc.EventID{CommitLSN: 0x1A2B3C8, Index: 0}
	if ev.ID != wantEv || ev.Schema != "public" || ev.Table != "orders" || ev.Op != cdc.OpUpdate || string(ev.Key) != `{"id":42}` {
		t.Errorf("event fields = %v %s.%s %s key %s", ev.ID, ev.Schema, ev.Table, ev.Op, ev.Key)
	}
}

func TestOps(t *testing.T) {
	c := newCollector(t, Options{})
	c.feed(
		pgt.Begin(0x1A2B3C8, 7412), pgt.Orders(1),
		&pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("42", "new", "1.00", "blob")},
		// Default replica identity, key unchanged: no old tuple.
		&pglogrepl.UpdateMessage{RelationID: 1, NewTuple: pgt.Tuple("42", "paid", "1.00", pgt.Toast)},
		// Key changed: 'K' tuple with the old key, the rest 'n'.
		&pglogrepl.UpdateMessage{RelationID: 1, OldTupleType: 'K', OldTuple: pgt.Tuple("42", nil, nil, nil), NewTuple: pgt.Tuple("43", "paid", nil, "blob2")},
		&pglogrepl.DeleteMessage{RelationID: 1, OldTupleType: 'K', OldTuple: pgt.Tuple("43", nil, nil, nil)},
	)
	want := []string{
		`{"id":"0/1A2B3C8:0",` + head + `"op":"insert","key":{"id":42},"new":{"id":42,"status":"new","total":"1.00","notes_blob":"blob"},"old":null}`,
		`{"id":"0/1A2B3C8:1",` + head + `"op":"update","key":{"id":42},"new":{"id":42,"status":"paid","total":"1.00"},"old":null,"unchanged":["notes_blob"]}`,
		`{"id":"0/1A2B3C8:2",` + head + `"op":"update","key":{"id":43},"new":{"id":43,"status":"paid","total":null,"notes_blob":"blob2"},"old":{"id":42}}`,
		`{"id":"0/1A2B3C8:3",` + head + `"op":"delete","key":{"id":43},"new":null,"old":{"id":43}}`,
	}
	if got := c.payloads(); !slices.Equal(got, want) {
		t.Errorf("payloads\n got %q\nwant %q", got, want)
	}
	for i, key := range []string{`{"id":42}`, `{"id":42}`, `{"id":43}`, `{"id":43}`} {
		if got := string(c.events[i].Key); got != key {
			t.Errorf("event %d key = %s, want %s", i, got, key)
		}
	}
	// Only the update that moved the row to another key names the old one.
	for i, old := range []string{"", "", `{"id":42}`, ""} {
		if got := string(c.events[i].OldKey); got != old || (old == "" && c.events[i].OldKey != nil) {
			t.Errorf("event %d OldKey = %q, want %q", i, got, old)
		}
	}
}

// A key column that is stored out of line and unchanged arrives as 'u' in
// the new tuple; the server then sends the old key, which supplies it.
func TestKeyFromOldTupleWhenToasted(t *testing.T) {
	c := newCollector(t, Options{})
	c.feed(pgt.Begin(0x1A2B3C8, 7412),
		pgt.Relation(1, "public", "docs", 'd', pgt.Column("path", pgtype.TextOID, true), pgt.Column("body", pgtype.TextOID, false)),
		&pglogrepl.UpdateMessage{RelationID: 1, OldTupleType: 'K', OldTuple: pgt.Tuple("/a/long/path", nil), NewTuple: pgt.Tuple(pgt.Toast, "x")},
	)
	got := string(c.events[0].Payload)
	if !strings.Contains(got, `"key":{"path":"/a/long/path"},"new":{"body":"x"},"old":{"path":"/a/long/path"},"unchanged":["path"]}`) {
		t.Errorf("payload = %s", got)
	}
	if c.events[0].OldKey != nil {
		t.Errorf("key unchanged, but OldKey = %s", c.events[0].OldKey)
	}
}

// In a 'K' tuple 'n' in a non-key column means "not part of the key"; in a
// key column (and anywhere in 'O' and new tuples) it is NULL.
func TestKeyTupleNulls(t *testing.T) {
	c := newCollector(t, Options{})
	c.feed(pgt.Begin(0x10, 1),
		pgt.Relation(1, "public", "t", 'i', pgt.Column("a", pgtype.Int4OID, true), pgt.Column("b", pgtype.TextOID, false), pgt.Column("c", pgtype.Int4OID, true)),
		&pglogrepl.DeleteMessage{RelationID: 1, OldTupleType: 'K', OldTuple: pgt.Tuple("1", nil, nil)},
	)
	got := string(c.events[0].Payload)
	if !strings.HasSuffix(got, `"key":{"a":1,"c":null},"new":null,"old":{"a":1,"c":null}}`) {
		t.Errorf("payload = %s", got)
	}
}

func TestReplicaIdentityFull(t *testing.T) {
	full := func() *pglogrepl.RelationMessage {
		// With REPLICA IDENTITY FULL pgoutput flags every column.
		return pgt.Relation(7, "shop", "items", 'f',
			pgt.Column("sku", pgtype.TextOID, true),
			pgt.Column("id", pgtype.Int4OID, true),
			pgt.Column("qty", pgtype.Int4OID, true),
		)
	}
	del := &pglogrepl.DeleteMessage{RelationID: 7, OldTupleType: 'O', OldTuple: pgt.Tuple("A-1", "5", nil)}
	upd := &pglogrepl.UpdateMessage{RelationID: 7, OldTupleType: 'O', OldTuple: pgt.Tuple("A-1", "5", nil), NewTuple: pgt.Tuple("A-1", "5", "3")}

	var asked []string
	pk := func(schema, table string) ([]string, error) {
		asked = append(asked, schema+"."+table)
		return []string{"id", "sku"}, nil
	}
	c := newCollector(t, Options{PrimaryKey: pk})
	c.feed(pgt.Begin(0x10, 1), full(), upd, del)
	if !slices.Equal(asked, []string{"shop.items"}) {
		t.Errorf("PrimaryKey asked for %v", asked)
	}
	want := []string{
		`"op":"update","key":{"id":5,"sku":"A-1"},"new":{"sku":"A-1","id":5,"qty":3},"old":{"sku":"A-1","id":5,"qty":null}}`,
		`"op":"delete","key":{"id":5,"sku":"A-1"},"new":null,"old":{"sku":"A-1","id":5,"qty":null}}`,
	}
	for i, w := range want {
		if got := string(c.events[i].Payload); !strings.HasSuffix(got, w) {
			t.Errorf("event %d = %s\nwant suffix %s", i, got, w)
		}
	}

	// Without a primary key (nil Options.PrimaryKey, no PK, or a PK column
	// the publication leaves out) the key is every flagged column.
	for name, pk := range map[string]func(string, string) ([]string, error){
		"nil":     nil,
		"no pk":   func(string, string) ([]string, error) { return nil, nil },
		"missing": func(string, string) ([]string, error) { return []string{"nope"}, nil },
	} {
		c := newCollector(t, Options{PrimaryKey: pk})
		c.feed(pgt.Begin(0x10, 1), full(), del)
		if got := string(c.events[0].Key); got != `{"sku":"A-1","id":5,"qty":null}` {
			t.Errorf("%s: key = %s", name, got)
		}
	}

	boom := errors.New("boom")
	d := New(Options{PrimaryKey: func(string, string) ([]string, error) { return nil, boom }})
	if err := d.Decode(full(), nil); !errors.Is(err, boom) || !strings.Contains(err.Error(), "shop.items") {
		t.Errorf("Decode with failing PrimaryKey = %v", err)
	}
}

func TestNoKey(t *testing.T) {
	c := newCollector(t, Options{})
	c.feed(pgt.Begin(0x10, 1),
		pgt.Relation(1, "public", "log", 'n', pgt.Column("msg", pgtype.TextOID, false)),
		&pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("hello")},
		&pglogrepl.UpdateMessage{RelationID: 1, NewTuple: pgt.Tuple("bye")},
	)
	for _, ev := range c.events {
		if string(ev.Key) != "null" || !strings.Contains(string(ev.Payload), `"key":null,`) {
			t.Errorf("event %s: key %s payload %s", ev.ID, ev.Key, ev.Payload)
		}
	}
}

func TestTruncate(t *testing.T) {
	c := newCollector(t, Options{})
	c.feed(pgt.Begin(0x1A2B3C8, 7412),
		pgt.Orders(1),
		pgt.Relation(2, "public", "lines", 'd', pgt.Column("id", pgtype.Int4OID, true)),
		pgt.Relation(3, pg.ControlSchema, "checkpoints", 'd', pgt.Column("sink", pgtype.TextOID, true)),
		&pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("1", "a", "1", "b")},
		&pglogrepl.TruncateMessage{RelationNum: 3, Option: pglogrepl.TruncateOptionCascade | pglogrepl.TruncateOptionRestartIdentity, RelationIDs: []uint32{1, 3, 2}},
		&pglogrepl.TruncateMessage{RelationNum: 1, RelationIDs: []uint32{2}},
	)
	want := []string{
		`{"id":"0/1A2B3C8:1",` + head + `"op":"truncate","key":null,"new":null,"old":null,"cascade":true,"restart_identity":true}`,
		`{"id":"0/1A2B3C8:2",` + strings.Replace(head, "orders", "lines", 1) + `"op":"truncate","key":null,"new":null,"old":null,"cascade":true,"restart_identity":true}`,
		`{"id":"0/1A2B3C8:3",` + strings.Replace(head, "orders", "lines", 1) + `"op":"truncate","key":null,"new":null,"old":null,"cascade":false,"restart_identity":false}`,
	}
	if got := c.payloads()[1:]; !slices.Equal(got, want) {
		t.Errorf("payloads\n got %q\nwant %q", got, want)
	}
	for _, ev := range c.events[1:] {
		if ev.Op != cdc.OpTruncate || string(ev.Key) != "null" {
			t.Errorf("event %s: op %s key %s", ev.ID, ev.Op, ev.Key)
		}
	}

	// An unknown relation fails the whole message before anything is emitted.
	n := len(c.events)
	err := c.d.Decode(&pglogrepl.TruncateMessage{RelationNum: 2, RelationIDs: []uint32{1, 99}}, c.emit)
	if err == nil || !strings.Contains(err.Error(), "99") || len(c.events) != n {
		t.Errorf("truncate with unknown relation: err %v, %d new events", err, len(c.events)-n)
	}
}

func TestControlSchemaDropped(t *testing.T) {
	c := newCollector(t, Options{})
	c.feed(pgt.Begin(0x10, 1),
		pgt.Relation(1, pg.ControlSchema, "checkpoints", 'd', pgt.Column("sink", pgtype.TextOID, true)),
		pgt.Orders(2),
		&pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("s")},
		&pglogrepl.InsertMessage{RelationID: 2, Tuple: pgt.Tuple("1", "a", "1", "b")},
		&pglogrepl.UpdateMessage{RelationID: 1, NewTuple: pgt.Tuple("s")},
		&pglogrepl.DeleteMessage{RelationID: 1, OldTupleType: 'K', OldTuple: pgt.Tuple("s")},
		&pglogrepl.TruncateMessage{RelationNum: 1, RelationIDs: []uint32{1}},
		&pglogrepl.InsertMessage{RelationID: 2, Tuple: pgt.Tuple("2", "a", "1", "b")},
	)
	if len(c.events) != 2 {
		t.Fatalf("got %d events, want 2: %q", len(c.events), c.payloads())
	}
	for i, ev := range c.events {
		if ev.ID.Index != uint64(i) || ev.Schema == pg.ControlSchema {
			t.Errorf("event %d: %s %s.%s", i, ev.ID, ev.Schema, ev.Table)
		}
	}
}

func TestErrors(t *testing.T) {
	d := New(Options{})
	noop := func(change.Event) error { return nil }

	if err := d.Decode(&pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("1")}, noop); err == nil || !strings.Contains(err.Error(), "no transaction") {
		t.Errorf("change outside a transaction: %v", err)
	}
	if err := d.Decode(pgt.Begin(0x10, 1), noop); err != nil {
		t.Fatal(err)
	}
	for _, m := range []pglogrepl.Message{
		&pglogrepl.InsertMessage{RelationID: 42, Tuple: pgt.Tuple("1")},
		&pglogrepl.UpdateMessage{RelationID: 42, NewTuple: pgt.Tuple("1")},
		&pglogrepl.DeleteMessage{RelationID: 42, OldTupleType: 'K', OldTuple: pgt.Tuple("1")},
	} {
		err := d.Decode(m, noop)
		if err == nil || !strings.Contains(err.Error(), "unknown relation id 42") {
			t.Errorf("%T on unknown relation: %v", m, err)
		}
	}

	if err := d.Decode(pgt.Orders(1), noop); err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]pglogrepl.Message{
		"short tuple":    &pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("1")},
		"nil tuple":      &pglogrepl.InsertMessage{RelationID: 1},
		"binary value":   &pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple(pgt.Binary{0, 1}, nil, nil, nil)},
		"bad old type":   &pglogrepl.UpdateMessage{RelationID: 1, OldTupleType: 'X', OldTuple: pgt.Tuple("1", nil, nil, nil), NewTuple: pgt.Tuple("1", nil, nil, nil)},
		"delete no old":  &pglogrepl.DeleteMessage{RelationID: 1, OldTupleType: 'K'},
		"nil message":    nil,
		"typed nil":      (*pglogrepl.InsertMessage)(nil),
		"stream message": &pglogrepl.StreamStartMessageV2{},
	} {
		if err := d.Decode(m, noop); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if got := d.Emitted(); got != 0 {
		t.Errorf("Emitted after failures = %d", got)
	}
	if err := d.Decode(&pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("1", nil, nil, nil)}, nil); err == nil {
		t.Error("nil emit: no error")
	}

	// Commit must close the transaction the Begin opened.
	if err := d.Decode(&pglogrepl.CommitMessage{CommitLSN: 0x11}, noop); err == nil {
		t.Error("commit with another LSN: no error")
	}
	if err := d.Decode(&pglogrepl.CommitMessage{CommitLSN: 0x10}, noop); err != nil {
		t.Error(err)
	}
	if err := d.Decode(&pglogrepl.CommitMessage{CommitLSN: 0x10}, noop); err == nil {
		t.Error("second commit: no error")
	}
}

func TestTransactionState(t *testing.T) {
	c := newCollector(t, Options{})
	d := c.d
	if d.InTransaction() || d.CommitLSN() != 0 || d.Emitted() != 0 {
		t.Fatalf("new decoder: in tx %v, lsn %s, emitted %d", d.InTransaction(), d.CommitLSN(), d.Emitted())
	}
	c.feed(pgt.Begin(0x5000, 9), pgt.Orders(1),
		&pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("1", "a", "1", "b")},
		&pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("2", "a", "1", "b")},
	)
	if !d.InTransaction() || d.CommitLSN() != 0x5000 || d.Emitted() != 2 {
		t.Errorf("in tx: %v, lsn %s, emitted %d", d.InTransaction(), d.CommitLSN(), d.Emitted())
	}
	c.feed(&pglogrepl.CommitMessage{CommitLSN: 0x5000, TransactionEndLSN: 0x5030})
	if d.InTransaction() || d.CommitLSN() != 0x5000 || d.Emitted() != 2 {
		t.Errorf("after commit: %v, lsn %s, emitted %d", d.InTransaction(), d.CommitLSN(), d.Emitted())
	}

	// The next transaction starts again at index 0, without a Relation
	// message: the cache lives as long as the connection.
	c.feed(pgt.Begin(0x6000, 10), &pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("3", "a", "1", "b")})
	if got := c.events[2].ID.String(); got != "0/6000:0" {
		t.Errorf("first id of second tx = %s", got)
	}
	if !strings.Contains(string(c.events[2].Payload), `"commit_lsn":"0/6000","xid":10,`) {
		t.Errorf("payload = %s", c.events[2].Payload)
	}

	// A failed emit does not consume the index.
	failing := errors.New("queue closed")
	err := d.Decode(&pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("4", "a", "1", "b")}, func(change.Event) error { return failing })
	if !errors.Is(err, failing) || d.Emitted() != 1 {
		t.Errorf("failing emit: err %v, emitted %d", err, d.Emitted())
	}

	// Reset forgets relations and the open transaction.
	d.Reset()
	if d.InTransaction() {
		t.Error("in a transaction after Reset")
	}
	c.feed(pgt.Begin(0x7000, 11))
	if err := d.Decode(&pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("5", "a", "1", "b")}, c.emit); err == nil {
		t.Error("relation known after Reset")
	}
}

// pgoutput sends a new Relation message when a table changes; it replaces
// the cached one entirely.
func TestRelationOverwrite(t *testing.T) {
	c := newCollector(t, Options{})
	c.feed(pgt.Begin(0x10, 1), pgt.Orders(1),
		&pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("1", "a", "1", "b")},
		pgt.Relation(1, "public", "orders", 'd',
			pgt.Column("id", pgtype.Int8OID, true),
			pgt.Column("status", pgtype.TextOID, false),
			pgt.Column("total", pgtype.NumericOID, false),
			pgt.Column("notes_blob", pgtype.TextOID, false),
			pgt.Column("paid", pgtype.BoolOID, false),
		),
		&pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("2", "a", "1", "b", "t")},
	)
	if c.events[1].Op != cdc.OpSchema {
		t.Fatalf("event 1 is %s, want the schema event before the first row in the new shape", c.events[1].Op)
	}
	if got := string(c.events[2].Payload); !strings.Contains(got, `"new":{"id":2,"status":"a","total":"1","notes_blob":"b","paid":true}`) {
		t.Errorf("after overwrite: %s", got)
	}
	if err := c.d.Decode(&pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("3", "a", "1", "b")}, c.emit); err == nil {
		t.Error("old column count accepted after overwrite")
	}
}

// Emitted events are queued; decoding more must not change them.
func TestEventsOwnTheirBytes(t *testing.T) {
	c := newCollector(t, Options{})
	c.feed(pgt.Begin(0x10, 1), pgt.Orders(1), &pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("1", "a", "1", "b")})
	first := string(c.events[0].Payload)
	firstKey := string(c.events[0].Key)
	c.feed(&pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("999999", "zzzzzzzzzzz", "2", "c")})
	if string(c.events[0].Payload) != first || string(c.events[0].Key) != firstKey {
		t.Errorf("first event changed: %s / %s", c.events[0].Payload, c.events[0].Key)
	}
	// Appending to Key must not write into Payload.
	_ = append(c.events[0].Key, "garbage"...)
	if string(c.events[0].Payload) != first {
		t.Errorf("append to Key changed Payload: %s", c.events[0].Payload)
	}
}

func TestEscaping(t *testing.T) {
	c := newCollector(t, Options{})
	c.feed(pgt.Begin(0x10, 1),
		pgt.Relation(1, `we"ird`, "ta\\ble", 'd', pgt.Column("k\ney", pgtype.TextOID, true)),
		&pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("a\"b\\c\x01\t\n\r\xff\u2028é")},
	)
	want := `"schema":"we\"ird","table":"ta\\ble","op":"insert","key":{"k\ney":"a\"b\\c\u0001\t\n\r\ufffd\u2028é"}`
	if got := string(c.events[0].Payload); !strings.Contains(got, want) {
		t.Errorf("payload = %s\nwant it to contain %s", got, want)
	}
}

func TestIgnoredMessages(t *testing.T) {
	c := newCollector(t, Options{})
	c.feed(pgt.Begin(0x10, 1),
		&pglogrepl.TypeMessage{DataType: 16500, Namespace: "public", Name: "mood"},
		&pglogrepl.OriginMessage{Name: "other"},
		&pglogrepl.LogicalDecodingMessage{Prefix: "p", Content: []byte("x")},
	)
	if len(c.events) != 0 {
		t.Errorf("got %d events", len(c.events))
	}
}

// Changes of a relation outside Options.Tables are dropped without using
// an index, and counted; a truncate naming both emits only the listed one.
func TestUnlistedTablesAreDropped(t *testing.T) {
	c := newCollector(t, Options{Tables: map[string]bool{"public.orders": true}})
	other := pgt.Relation(2, "public", "other", 'd', pgt.Column("id", pgtype.Int8OID, true))
	c.feed(pgt.Begin(0x1A2B3C8, 7412), pgt.Orders(1), other,
		&pglogrepl.InsertMessage{RelationID: 2, Tuple: pgt.Tuple("1")},
		&pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("42", "new", "1.00", "blob")},
		&pglogrepl.TruncateMessage{RelationNum: 2, RelationIDs: []uint32{2, 1}},
	)
	if len(c.events) != 2 || c.events[0].ID.Index != 0 || c.events[1].ID.Index != 1 || c.events[1].Op != cdc.OpTruncate || c.events[1].Table != "orders" {
		t.Fatalf("events %v", c.payloads())
	}
	if n := c.d.Unlisted(); n != 2 {
		t.Fatalf("Unlisted = %d, want 2", n)
	}
}

// A big envelope is handed over without a copy and not kept for reuse.
func TestBigEnvelopeIsHandedOver(t *testing.T) {
	c := newCollector(t, Options{})
	big := strings.Repeat("x", bigEnvelope+1)
	c.feed(pgt.Begin(0x1A2B3C8, 7412), pgt.Orders(1), &pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("42", "new", "1.00", big)})
	if len(c.events) != 1 || !strings.Contains(string(c.events[0].Payload), big) {
		t.Fatal("big row not emitted whole")
	}
	if cap(c.d.buf) != 0 {
		t.Fatalf("decoder kept a %d-byte buffer after a big row", cap(c.d.buf))
	}
}
