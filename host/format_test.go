package host_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host"
)

// TestDebeziumFormat: with Format "debezium", Event.JSON and Event.JSONKey
// are what a daemon's sink on that format delivers (Debezium's change
// event and key), while the Event's fields stay the envelope's.
func TestDebeziumFormat(t *testing.T) {
	dsn, db := setup(t)
	slot := slotName("dbz")
	execT(t, db, `CREATE TABLE prices (id int PRIMARY KEY, amount numeric(8,2))`)
	s := openConfig(t, host.StreamConfig{DSN: dsn, Tables: []string{"public.prices"}, Slot: slot,
		Format: "debezium", Debezium: host.Debezium{Name: "dbserver1", DecimalHandlingMode: "string"}})
	execT(t, db, `INSERT INTO prices VALUES (1, 19.90)`)
	execT(t, db, `DELETE FROM prices`)
	for _, want := range []struct{ op, after, before string }{
		{"c", `{"id":1,"amount":"19.90"}`, "null"},
		{"d", "null", `{"id":1,"amount":null}`},
	} {
		ev := next(t, s)
		var v struct {
			Before, After json.RawMessage
			Op            string
			Source        struct{ Name, Table string }
		}
		if err := json.Unmarshal(ev.JSON(), &v); err != nil {
			t.Fatalf("event %s: %v: %s", ev.ID, err, ev.JSON())
		}
		if v.Op != want.op || string(v.After) != want.after || string(v.Before) != want.before ||
			v.Source.Name != "dbserver1" || v.Source.Table != "prices" {
			t.Errorf("event %s: %s", ev.ID, ev.JSON())
		}
		if string(ev.JSONKey()) != `{"id":1}` || string(ev.Key) != `{"id":1}` || ev.Table != "prices" {
			t.Errorf("event %s: key %s, envelope key %s", ev.ID, ev.JSONKey(), ev.Key)
		}
	}
}

// TestSequinFormat: with Format "sequin", Event.JSON is Sequin's message.
func TestSequinFormat(t *testing.T) {
	ev, _, slot := noteInserted(t, "sequin")
	var m struct {
		Record   map[string]any
		Action   string
		Metadata struct {
			IdempotencyKey string `json:"idempotency_key"`
			Consumer       struct{ Name string }
		}
	}
	if err := json.Unmarshal(ev.JSON(), &m); err != nil {
		t.Fatal(err)
	}
	if m.Action != "insert" || m.Record["body"] != "a" || m.Metadata.IdempotencyKey != ev.ID.String() || m.Metadata.Consumer.Name != slot {
		t.Errorf("sequin message %s", ev.JSON())
	}
	if string(ev.JSONKey()) != `{"id":1}` {
		t.Errorf("key %s", ev.JSONKey())
	}
}

// TestCloudEventsFormat: with Format "cloudevents", Event.JSON is a
// CloudEvent whose id is the event's, whose source names the slot, the
// database and the table, and whose data is the envelope.
func TestCloudEventsFormat(t *testing.T) {
	ev, db, slot := noteInserted(t, "cloudevents")
	var e struct {
		SpecVersion, ID, Source, Type, Subject string
		Data                                   struct {
			New map[string]any
		}
	}
	if err := json.Unmarshal(ev.JSON(), &e); err != nil {
		t.Fatal(err)
	}
	var database string
	if err := db.QueryRow(context.Background(), `SELECT current_database()`).Scan(&database); err != nil {
		t.Fatal(err)
	}
	if e.SpecVersion != "1.0" || e.ID != ev.ID.String() || e.Type != "com.walcast.public.notes.insert" || e.Subject != `{"id":1}` ||
		e.Source != "/walcast/"+slot+"/"+database+"/public/notes" || e.Data.New["body"] != "a" {
		t.Errorf("cloudevent %s", ev.JSON())
	}
	if string(ev.JSONKey()) != `{"id":1}` {
		t.Errorf("key %s", ev.JSONKey())
	}
}

// noteInserted opens a stream in format on a new table, inserts one row
// and returns its event, the database and the slot.
func noteInserted(t *testing.T, format string) (host.Event, *pgx.Conn, string) {
	t.Helper()
	dsn, db := setup(t)
	slot := slotName(format[:3])
	execT(t, db, `CREATE TABLE notes (id int PRIMARY KEY, body text)`)
	s := openConfig(t, host.StreamConfig{DSN: dsn, Tables: []string{"public.notes"}, Slot: slot, Format: format})
	execT(t, db, `INSERT INTO notes VALUES (1, 'a')`)
	return next(t, s), db, slot
}
