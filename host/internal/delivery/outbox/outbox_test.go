package outbox

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/walcast/walcast/pluginkit/cdc"
)

func router(t testing.TB, spec Spec) *Router {
	t.Helper()
	r, err := New(spec)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// envelope is an event of public.outbox as the decoder writes it.
func envelope(op cdc.Op, key, nu string) cdc.Event {
	id := cdc.EventID{CommitLSN: 0x1A2B3C8, Index: 3}
	payload := fmt.Sprintf(`{"id":%q,"commit_lsn":"0/1A2B3C8","xid":9,"commit_time":"2026-12-02T10:00:00.000000Z","schema":"public","table":"outbox","op":%q,"key":%s,"new":%s,"old":null}`,
		id.String(), op, key, nu)
	return cdc.Event{ID: id, Schema: "public", Table: "outbox", Op: op, Key: []byte(key), Payload: []byte(payload)}
}

// The payload is the column as it is: a json/jsonb column's document
// (embedded in the envelope) byte for byte, a text column's content
// (escapes decoded); the key is the aggregate id's JSON, the route the
// prefix plus the aggregate type, the id and type headers the columns'
// text; the event keeps the captured id.
func TestApplyPayloadKinds(t *testing.T) {
	r := router(t, Defaults("public.outbox"))
	cases := []struct {
		name, row, payload, key string
	}{
		{"jsonb", `{"id":"6f1c","aggregatetype":"order","aggregateid":"o-1","type":"OrderCreated","payload":{"total":12.5,"items":[1,2]}}`,
			`{"total":12.5,"items":[1,2]}`, `"o-1"`},
		{"text", `{"id":"6f1c","aggregatetype":"order","aggregateid":"o-1","type":"OrderCreated","payload":"plain \"quoted\" text\n"}`,
			"plain \"quoted\" text\n", `"o-1"`},
		{"text without escapes", `{"id":"6f1c","aggregatetype":"order","aggregateid":"o-1","type":"OrderCreated","payload":"{\u0022a\u0022:1}"}`,
			`{"a":1}`, `"o-1"`},
		{"numeric aggregate id", `{"id":"6f1c","aggregatetype":"order","aggregateid":42,"type":"OrderCreated","payload":[1]}`,
			`[1]`, `42`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ev := envelope(cdc.OpInsert, `{"id":"6f1c"}`, c.row)
			res, err := r.Apply(ev)
			if err != nil {
				t.Fatal(err)
			}
			got := res.Event
			if !res.Keep || string(got.Payload) != c.payload || string(got.Key) != c.key || string(res.Lane) != c.key {
				t.Fatalf("keep %v, payload %q key %s lane %s; want payload %q key %s", res.Keep, got.Payload, got.Key, res.Lane, c.payload, c.key)
			}
			if got.ID != ev.ID || got.Route != "outbox.event.order" || got.Op != cdc.OpInsert {
				t.Fatalf("id %s route %q op %s", got.ID, got.Route, got.Op)
			}
			if want := map[string]string{"id": "6f1c", "type": "OrderCreated"}; !maps.Equal(got.Headers, want) {
				t.Fatalf("headers %v, want %v", got.Headers, want)
			}
		})
	}
}

// Column names and the prefix come from the spec; an empty prefix
// routes by the aggregate type alone; a NULL id or type sends no header.
func TestApplyCustomColumns(t *testing.T) {
	spec := Spec{Table: "app.events", IDColumn: "event_id", KeyColumn: "agg", RouteColumn: "kind",
		PayloadColumn: "body", TypeColumn: "event_type", RoutePrefix: ""}
	r := router(t, spec)
	ev := envelope(cdc.OpInsert, `{"event_id":1}`, `{"event_id":1,"agg":"c-9","kind":"customer","body":{"x":1},"event_type":null}`)
	ev.Schema, ev.Table = "app", "events"
	if !r.Covers(&ev) {
		t.Fatal("the router does not cover its own table")
	}
	res, err := r.Apply(ev)
	if err != nil {
		t.Fatal(err)
	}
	if res.Event.Route != "customer" || string(res.Event.Payload) != `{"x":1}` || !maps.Equal(res.Event.Headers, map[string]string{"id": "1"}) {
		t.Fatalf("route %q payload %s headers %v", res.Event.Route, res.Event.Payload, res.Event.Headers)
	}
	other := envelope(cdc.OpInsert, `{"id":1}`, `{"id":1}`)
	if r.Covers(&other) || (*Router)(nil).Covers(&ev) {
		t.Fatal("covers another table, or a nil router covers something")
	}
}

// Updates, deletes, truncates and everything else of the outbox table
// are resolved without an event and without an error.
func TestApplyFiltersAllButInserts(t *testing.T) {
	r := router(t, Defaults("public.outbox"))
	for _, op := range []cdc.Op{cdc.OpUpdate, cdc.OpDelete, cdc.OpTruncate, cdc.OpRead, cdc.OpSchema} {
		res, err := r.Apply(envelope(op, `{"id":"6f1c"}`, `null`))
		if err != nil || res.Keep {
			t.Fatalf("%s: keep %v, err %v", op, res.Keep, err)
		}
	}
}

// A NULL or missing aggregate id, aggregate type or payload is an error
// naming the column, never a dropped event; the lane is the aggregate
// whenever its id is known, so the aggregate's later events park behind.
func TestApplyNullColumnsPark(t *testing.T) {
	r := router(t, Defaults("public.outbox"))
	cases := []struct {
		row, column, lane string
	}{
		{`{"id":"1","aggregatetype":"order","aggregateid":null,"type":"T","payload":{}}`, `"aggregateid" (the aggregate id) is NULL`, ""},
		{`{"id":"1","aggregatetype":null,"aggregateid":"o-1","type":"T","payload":{}}`, `"aggregatetype" (the aggregate type) is NULL`, `"o-1"`},
		{`{"id":"1","aggregatetype":"order","aggregateid":"o-1","type":"T","payload":null}`, `"payload" (the payload) is NULL`, `"o-1"`},
		{`{"id":"1","aggregatetype":"order","aggregateid":"o-1","type":"T"}`, `no column "payload"`, `"o-1"`},
		{`{"id":"1","aggregatetype":"","aggregateid":"o-1","type":"T","payload":{}}`, `"aggregatetype" (the aggregate type) is empty`, `"o-1"`},
	}
	for _, c := range cases {
		res, err := r.Apply(envelope(cdc.OpInsert, `{"id":"1"}`, c.row))
		if err == nil || !strings.Contains(err.Error(), c.column) {
			t.Fatalf("%s: err %v, want one naming %s", c.row, err, c.column)
		}
		if res.Keep || string(res.Lane) != c.lane {
			t.Fatalf("%s: keep %v lane %s, want lane %s", c.row, res.Keep, res.Lane, c.lane)
		}
	}
}

func TestNewRefusesBadSpecs(t *testing.T) {
	if _, err := New(Defaults("outbox")); err == nil {
		t.Fatal("a table without a schema was accepted")
	}
	s := Defaults("public.outbox")
	s.KeyColumn = ""
	if _, err := New(s); err == nil || !strings.Contains(err.Error(), "key_column") {
		t.Fatalf("empty key_column: %v", err)
	}
}

// BenchmarkApply is the host's cost per outbox event: one insert of a
// typical outbox row (uuid id, short type and aggregate, a 200-byte jsonb
// payload) turned into the event the sink receives.
func BenchmarkApply(b *testing.B) {
	r := router(b, Defaults("public.outbox"))
	payload := `{"order_id":"o-12345","customer":"c-987","total":"169.74","currency":"EUR","items":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1}],"note":"leave at the door"}`
	ev := envelope(cdc.OpInsert, `{"id":"0b6f1c2e-8f7a-4c1e-9a57-6b2f0f7d9e11"}`,
		`{"id":"0b6f1c2e-8f7a-4c1e-9a57-6b2f0f7d9e11","aggregatetype":"order","aggregateid":"o-12345","type":"OrderCreated","payload":`+payload+`}`)
	b.ReportAllocs()
	for b.Loop() {
		res, err := r.Apply(ev)
		if err != nil || !res.Keep {
			b.Fatal(err)
		}
	}
}
