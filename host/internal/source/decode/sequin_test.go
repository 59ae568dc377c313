package decode

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/jackc/pglogrepl"

	pgt "github.com/walcast/walcast/host/internal/source/pgoutput/pgoutputtest"
)

// The fields of Sequin's documented messages (docs/reference/messages.mdx
// in Sequin's repository: the insert, update, delete and read examples),
// each present with the documented type; record and changes as the
// documentation defines them.
func TestSequinDocumentedShape(t *testing.T) {
	opts := SequinOptions{Consumer: "orders_kafka", Database: "myapp-prod", Hostname: "db.example.com"}
	c := newCollector(t, Options{Formats: []Format{{Name: FormatSequin, Sequin: opts}}})
	full := pgt.Relation(1, "public", "orders", 'f',
		pgt.Column("id", 23, true), pgt.Column("status", 25, true), pgt.Column("note", 25, true))
	c.feed(pgt.Begin(0x1A2B3C8, 7412), full,
		&pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple("1234", "pending", "a")},
		&pglogrepl.UpdateMessage{RelationID: 1, OldTupleType: 'O', OldTuple: pgt.Tuple("1234", "pending", "a"), NewTuple: pgt.Tuple("1234", "shipped", "a")},
		&pglogrepl.DeleteMessage{RelationID: 1, OldTupleType: 'O', OldTuple: pgt.Tuple("1234", "shipped", "a")},
		&pglogrepl.UpdateMessage{RelationID: 1, NewTuple: pgt.Tuple("5", "x", "y")}, // no old row sent
	)
	want := []struct {
		action          string
		record, changes any
	}{
		{"insert", map[string]any{"id": 1234.0, "status": "pending", "note": "a"}, nil},
		{"update", map[string]any{"id": 1234.0, "status": "shipped", "note": "a"}, map[string]any{"status": "pending"}},
		{"delete", map[string]any{"id": 1234.0, "status": "shipped", "note": "a"}, nil},
		{"update", map[string]any{"id": 5.0, "status": "x", "note": "y"}, map[string]any{}},
	}
	for i, w := range want {
		var m struct {
			Record, Changes any
			Action          string
			Metadata        map[string]any
		}
		ev := c.events[i]
		if err := json.Unmarshal(ev.Formats[0].Payload, &m); err != nil {
			t.Fatalf("event %d: %v: %s", i, err, ev.Formats[0].Payload)
		}
		if m.Action != w.action || !reflect.DeepEqual(m.Record, w.record) || !reflect.DeepEqual(m.Changes, w.changes) {
			t.Errorf("event %d: action %s record %v changes %v, want %s %v %v", i, m.Action, m.Record, m.Changes, w.action, w.record, w.changes)
		}
		md := m.Metadata
		if md["table_schema"] != "public" || md["table_name"] != "orders" || md["idempotency_key"] != ev.ID.String() ||
			md["commit_timestamp"] != "2026-11-30T10:00:00.123456Z" || md["commit_lsn"] != float64(0x1A2B3C8) ||
			md["commit_idx"] != float64(i) || md["database_name"] != "myapp-prod" {
			t.Errorf("event %d: metadata %v", i, md)
		}
		consumer, _ := md["consumer"].(map[string]any)
		db, _ := md["database"].(map[string]any)
		if consumer["id"] != "orders_kafka" || consumer["name"] != "orders_kafka" || db["database"] != "myapp-prod" || db["hostname"] != "db.example.com" {
			t.Errorf("event %d: consumer %v database %v", i, consumer, db)
		}
		if _, ok := md["transaction_annotations"]; !ok {
			t.Errorf("event %d: no transaction_annotations", i)
		}
		if string(ev.Formats[0].Key) != string(ev.Key) {
			t.Errorf("event %d: key %s, envelope key %s", i, ev.Formats[0].Key, ev.Key)
		}
	}
}
