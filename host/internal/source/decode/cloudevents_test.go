package decode

import (
	"encoding/json"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	pgt "github.com/walcast/walcast/host/internal/source/pgoutput/pgoutputtest"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// TestCloudEventsFormat: every event, a resync marker included, is a
// CloudEvent the official Go SDK reads and validates, with the walcast id,
// a source naming the table (percent-encoded), the type of its op, the
// row key as subject (none for a table-wide event), the commit time, the
// commit LSN and xid as extensions and the envelope, byte for byte, as
// data. The debezium format next to it is unchanged, and gets the
// envelope for the marker as before.
func TestCloudEventsFormat(t *testing.T) {
	ce := Format{Name: FormatCloudEvents, CloudEvents: CloudEventsOptions{Source: "/walcast/p/shop"}}
	dbz := Format{Name: FormatDebezium, Debezium: DebeziumOptions{Name: "shop", Database: "shop", Version: "walcast"}}
	c := newCollector(t, Options{Pipeline: "p", Formats: []Format{dbz, ce}})
	rel := pgt.Relation(1, "public", "Order Lines", 'd',
		pgt.Column("id", pgtype.Int4OID, true), pgt.Column("status", pgtype.TextOID, false))
	c.feed(pgt.Begin(0x1A2B3C8, 7412), rel,
		&pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("42", "new")},
		&pglogrepl.UpdateMessage{RelationID: 1, OldTupleType: 'K', OldTuple: pgt.Tuple("42", nil), NewTuple: pgt.Tuple("43", "paid")},
		&pglogrepl.DeleteMessage{RelationID: 1, OldTupleType: 'K', OldTuple: pgt.Tuple("43", nil)},
		&pglogrepl.TruncateMessage{RelationNum: 1, RelationIDs: []uint32{1}},
		markerMessage(t, ResyncMarker{Pipeline: "p", Resync: 7, Phase: ResyncBegin, Schema: "public", Table: "Order Lines"}),
	)
	want := []struct {
		typ, subject string
	}{
		{"com.walcast.public.Order Lines.insert", `{"id":42}`},
		{"com.walcast.public.Order Lines.update", `{"id":43}`},
		{"com.walcast.public.Order Lines.delete", `{"id":43}`},
		{"com.walcast.public.Order Lines.truncate", ""},
		{"com.walcast.public.Order Lines.resync_begin", ""},
	}
	if len(c.events) != len(want) {
		t.Fatalf("got %d events, want %d", len(c.events), len(want))
	}
	for i, w := range want {
		ev := c.events[i]
		if len(ev.Formats) != 2 {
			t.Fatalf("event %s: %d formats, want 2", ev.ID, len(ev.Formats))
		}
		enc := ev.Formats[1]
		var e cloudevents.Event
		if err := json.Unmarshal(enc.Payload, &e); err != nil {
			t.Fatalf("event %s: the SDK cannot read %s: %v", ev.ID, enc.Payload, err)
		}
		if err := e.Validate(); err != nil {
			t.Errorf("event %s: invalid CloudEvent: %v", ev.ID, err)
		}
		checkAttr := func(name string, got, want any) {
			t.Helper()
			if got != want {
				t.Errorf("event %s: %s = %v, want %v", ev.ID, name, got, want)
			}
		}
		checkAttr("specversion", e.SpecVersion(), "1.0")
		checkAttr("id", e.ID(), ev.ID.String())
		checkAttr("source", e.Source(), "/walcast/p/shop/public/Order%20Lines")
		checkAttr("type", e.Type(), w.typ)
		checkAttr("subject", e.Subject(), w.subject)
		checkAttr("time", e.Time().Format(time.RFC3339Nano), pgt.CommitTime.UTC().Truncate(time.Microsecond).Format(time.RFC3339Nano))
		checkAttr("datacontenttype", e.DataContentType(), "application/json")
		checkAttr("commitlsn", e.Extensions()["commitlsn"], "0/1A2B3C8")
		checkAttr("xid", e.Extensions()["xid"], "7412")
		checkAttr("data", string(e.Data()), string(ev.Payload))
		checkAttr("key", string(enc.Key), string(ev.Key))
		checkAttr("old key", string(enc.OldKey), string(ev.OldKey))
		if ev.Op == cdc.OpResyncBegin && string(ev.Formats[0].Payload) != string(ev.Payload) {
			t.Errorf("marker: the debezium format's place holds %s, want the envelope", ev.Formats[0].Payload)
		}
		if ev.Op == cdc.OpInsert && string(ev.Formats[0].Payload) == string(ev.Payload) {
			t.Errorf("insert: the debezium format's place holds the envelope")
		}
	}
}

// TestCloudEventsMessages: an application message is a CloudEvent of its
// own type with source <base>/messages; a non-transactional one has no
// commit, so it carries no time, commitlsn or xid (its envelope has them
// null) instead of a zero time and xid 0.
func TestCloudEventsMessages(t *testing.T) {
	ce := Format{Name: FormatCloudEvents, CloudEvents: CloudEventsOptions{Source: "/walcast/p/shop", TypePrefix: "com.example.shop"}}
	c := newCollector(t, Options{Pipeline: "p", Formats: []Format{ce}, MessagePrefixes: []string{"app."}})
	c.feed(
		appMessage(0x1A2B000, false, "app.audit", `{"n":1}`),
		pgt.Begin(0x1A2B3C8, 7412),
		appMessage(0x1A2B100, true, "app.orders", `{"order":42}`),
		&pglogrepl.CommitMessage{CommitLSN: 0x1A2B3C8, TransactionEndLSN: 0x1A2B3F0},
	)
	if len(c.events) != 2 {
		t.Fatalf("got %d events, want 2", len(c.events))
	}
	for i, ev := range c.events {
		var e cloudevents.Event
		if err := json.Unmarshal(ev.Formats[0].Payload, &e); err != nil {
			t.Fatalf("event %s: the SDK cannot read %s: %v", ev.ID, ev.Formats[0].Payload, err)
		}
		if err := e.Validate(); err != nil {
			t.Errorf("event %s: invalid CloudEvent: %v", ev.ID, err)
		}
		if e.Type() != "com.example.shop.message" || e.Source() != "/walcast/p/shop/messages" || e.ID() != ev.ID.String() {
			t.Errorf("event %s: type %q source %q id %q", ev.ID, e.Type(), e.Source(), e.ID())
		}
		_, hasXID := e.Extensions()["xid"]
		if transactional := i == 1; transactional != hasXID || transactional == e.Time().IsZero() {
			t.Errorf("event %s (transactional %v): time %v, extensions %v", ev.ID, transactional, e.Time(), e.Extensions())
		}
	}
}
