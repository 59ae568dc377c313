package outbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/walcast/walcast/pluginkit/cdc"
)

// Spec is a sink's outbox block: the table and the names of its columns.
// Every field is set (Defaults gives Debezium's names).
type Spec struct {
	// Table is "schema.table".
	Table string
	// IDColumn and TypeColumn become the "id" and "type" headers;
	// KeyColumn (the aggregate id) the key and the lane; RouteColumn (the
	// aggregate type) the route after RoutePrefix; PayloadColumn the body.
	IDColumn, KeyColumn, RouteColumn, PayloadColumn, TypeColumn string
	// RoutePrefix is put before the aggregate type. "" routes by the
	// aggregate type alone.
	RoutePrefix string
}

// DefaultRoutePrefix makes the topics Debezium's Outbox Event Router
// names by default (route.topic.replacement = outbox.event.${routedByValue}):
// aggregate type "order" goes to "outbox.event.order".
const DefaultRoutePrefix = "outbox.event."

// Header names of the event's id and type (Debezium's router puts the id
// in a header named "id").
const (
	HeaderID   = "id"
	HeaderType = "type"
)

// Defaults is the spec of table with Debezium's column names and topic
// prefix.
func Defaults(table string) Spec {
	return Spec{
		Table: table, IDColumn: "id", KeyColumn: "aggregateid", RouteColumn: "aggregatetype",
		PayloadColumn: "payload", TypeColumn: "type", RoutePrefix: DefaultRoutePrefix,
	}
}

// Columns returns the columns the spec names, each with the attribute
// that names it ("id_column" …), in that order.
func (s Spec) Columns() [][2]string {
	return [][2]string{
		{"id_column", s.IDColumn}, {"key_column", s.KeyColumn}, {"route_column", s.RouteColumn},
		{"payload_column", s.PayloadColumn}, {"type_column", s.TypeColumn},
	}
}

// Router applies one sink's outbox spec. It is safe for concurrent use
// (it holds no state besides the spec).
type Router struct {
	spec          Spec
	schema, table string
}

// New returns the router of spec; an error when the table is not
// "schema.table" or a column name is empty.
func New(spec Spec) (*Router, error) {
	schema, table, ok := strings.Cut(spec.Table, ".")
	if !ok || schema == "" || table == "" {
		return nil, fmt.Errorf("outbox table %q: want schema.table", spec.Table)
	}
	for _, c := range spec.Columns() {
		if c[1] == "" {
			return nil, fmt.Errorf("outbox %s is empty", c[0])
		}
	}
	return &Router{spec: spec, schema: schema, table: table}, nil
}

// Spec returns the router's spec.
func (r *Router) Spec() Spec { return r.spec }

// Covers reports whether ev is an event of the outbox table (nil covers
// nothing).
func (r *Router) Covers(ev *cdc.Event) bool {
	return r != nil && ev.Table == r.table && ev.Schema == r.schema
}

// Result is what Apply made of an event of the outbox table.
type Result struct {
	// Keep is false for anything but an insert: the sink receives
	// nothing, and the event is resolved at once.
	Keep bool
	// Event is the outbox event the sink receives (Keep, no error).
	Event cdc.Event
	// Lane is the aggregate id's raw JSON: the scheduler's ordering key
	// for the event. Set whenever the row has a non-null aggregate id,
	// even with an error (then the event parks in its aggregate's lane,
	// and the aggregate's later events park behind it).
	Lane []byte
}

// Apply makes the outbox event of ev, an event of the outbox table
// (Covers). An error names the column at fault; ev is then to be parked
// as it is.
func (r *Router) Apply(ev cdc.Event) (Result, error) {
	if ev.Op != cdc.OpInsert {
		return Result{}, nil
	}
	nu, ok := ev.Member("new")
	if !ok || len(nu) == 0 || nu[0] != '{' {
		return Result{}, fmt.Errorf("outbox: the insert into %s has no new row", r.spec.Table)
	}
	var id, key, route, payload, typ []byte
	s := &r.spec
	err := cdc.EachMember(nu, func(name, value []byte) error {
		// Not a switch: several spec fields may name one column.
		if string(name) == s.KeyColumn {
			key = value
		}
		if string(name) == s.RouteColumn {
			route = value
		}
		if string(name) == s.PayloadColumn {
			payload = value
		}
		if string(name) == s.IDColumn {
			id = value
		}
		if string(name) == s.TypeColumn {
			typ = value
		}
		return nil
	})
	if err != nil {
		return Result{}, fmt.Errorf("outbox: read the new row: %w", err)
	}
	res := Result{}
	if !isNull(key) {
		res.Lane = key
	}
	if err := r.need(s.KeyColumn, "aggregate id", key); err != nil {
		return res, err
	}
	if err := r.need(s.RouteColumn, "aggregate type", route); err != nil {
		return res, err
	}
	if err := r.need(s.PayloadColumn, "payload", payload); err != nil {
		return res, err
	}
	routeText, err := text(route)
	if err != nil {
		return res, fmt.Errorf("outbox: column %q (the aggregate type): %w", s.RouteColumn, err)
	}
	if routeText == "" {
		return res, fmt.Errorf("outbox: column %q (the aggregate type) is empty: the event would have no destination", s.RouteColumn)
	}
	body, err := textBytes(payload)
	if err != nil {
		return res, fmt.Errorf("outbox: column %q (the payload): %w", s.PayloadColumn, err)
	}
	headers := make(map[string]string, 2)
	for _, h := range [...]struct {
		name, column string
		raw          []byte
	}{{HeaderID, s.IDColumn, id}, {HeaderType, s.TypeColumn, typ}} {
		if isNull(h.raw) {
			continue // Debezium's router, too, sends no header for a NULL
		}
		v, err := text(h.raw)
		if err != nil {
			return res, fmt.Errorf("outbox: column %q: %w", h.column, err)
		}
		headers[h.name] = v
	}
	res.Keep = true
	res.Event = cdc.Event{
		ID: ev.ID, Schema: ev.Schema, Table: ev.Table, Op: ev.Op,
		Key: key, Payload: body, Route: s.RoutePrefix + routeText, Headers: headers,
	}
	return res, nil
}

// need returns the error of a required column that is missing or NULL.
func (r *Router) need(column, what string, raw []byte) error {
	switch {
	case raw == nil:
		return fmt.Errorf("outbox: the row inserted into %s has no column %q (the %s): fix the outbox block's column names, then walcast replay", r.spec.Table, column, what)
	case isNull(raw):
		return fmt.Errorf("outbox: column %q (the %s) is NULL in the row inserted into %s", column, what, r.spec.Table)
	}
	return nil
}

func isNull(raw []byte) bool { return raw == nil || bytes.Equal(raw, []byte("null")) }

// textBytes is the content of a JSON string (a text column), or the raw
// JSON of anything else (a json or jsonb column, a number).
func textBytes(raw []byte) ([]byte, error) {
	if len(raw) < 2 || raw[0] != '"' {
		return raw, nil
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw[1 : len(raw)-1], nil // no escapes: the content as it lies
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("decode the string: %w", err)
	}
	return []byte(s), nil
}

func text(raw []byte) (string, error) {
	b, err := textBytes(raw)
	return string(b), err
}
