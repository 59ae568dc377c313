package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// A Parquet object holds one row per event. Its schema follows from the
// envelope and from the values of the object's events:
//
//	id, commit_lsn, schema, table, op   STRING, required
//	xid                                 INT64, required
//	commit_time                         TIMESTAMP(MICROS, UTC), required
//	key, new, old                       optional groups, one optional column per table column
//	unchanged                           optional JSON (the envelope's array)
//	cascade, restart_identity           optional BOOLEAN (truncates)
//	columns, before, changes            optional JSON (schema events)
//	replica_identity                    optional STRING (schema events)
//
// A row column's type is the narrowest that holds every value the object
// has for it: BOOLEAN, INT64 (JSON integers within int64), DOUBLE (other
// JSON numbers), STRING (JSON strings: numeric, text, timestamps, bytea as
// base64, enums), else JSON (the value's JSON text: json/jsonb, arrays,
// and a column whose values mix kinds, such as a float column holding
// "NaN"). A column with only nulls is a STRING. A group none of whose
// events has (key of a keyless table, old without REPLICA IDENTITY FULL
// and no key change, every group of a truncate-only object) is left out.

// kind is what a row column's values are, widened as more are seen.
type kind int

const (
	kindNull kind = iota
	kindBool
	kindInt
	kindFloat
	kindString
	kindJSON
)

// widen is the kind that holds values of both a and b.
func widen(a, b kind) kind {
	switch {
	case a == b || b == kindNull:
		return a
	case a == kindNull:
		return b
	case (a == kindInt && b == kindFloat) || (a == kindFloat && b == kindInt):
		return kindFloat
	}
	return kindJSON
}

// kindOf classifies one raw JSON value.
func kindOf(raw []byte) kind {
	switch raw[0] {
	case 'n':
		return kindNull
	case 't', 'f':
		return kindBool
	case '"':
		return kindString
	case '{', '[':
		return kindJSON
	}
	if bytes.ContainsAny(raw, ".eE") {
		return kindFloat
	}
	if _, err := strconv.ParseInt(string(raw), 10, 64); err != nil {
		return kindFloat // an integer beyond int64
	}
	return kindInt
}

func (k kind) node() parquet.Node {
	switch k {
	case kindBool:
		return parquet.Optional(parquet.Leaf(parquet.BooleanType))
	case kindInt:
		return parquet.Optional(parquet.Int(64))
	case kindFloat:
		return parquet.Optional(parquet.Leaf(parquet.DoubleType))
	case kindJSON:
		return parquet.Optional(parquet.JSON())
	}
	return parquet.Optional(parquet.String())
}

// rowGroups are the envelope members whose row data become groups.
var rowGroups = [...]string{"key", "new", "old"}

// member is one member of a JSON object, raw.
type member struct{ name, value []byte }

// parsedEvent is what a row is built from: the envelope's members, and the
// members of each row group (nil when the group is null or absent).
type parsedEvent struct {
	top    map[string][]byte
	groups [len(rowGroups)][]member
}

// parquetEncoder writes an object as Parquet.
type parquetEncoder struct {
	version string
}

func (p *parquetEncoder) contentType() string { return "application/vnd.apache.parquet" }

func (p *parquetEncoder) encode(o *object) ([]byte, error) {
	evs := make([]parsedEvent, len(o.events))
	var cols [len(rowGroups)]map[string]kind
	for i := range o.events {
		pe, err := parseEvent(&o.events[i])
		if err != nil {
			return nil, err
		}
		evs[i] = pe
		for g, ms := range pe.groups {
			for _, m := range ms {
				if cols[g] == nil {
					cols[g] = map[string]kind{}
				}
				name := string(m.name)
				cols[g][name] = widen(cols[g][name], kindOf(m.value))
			}
		}
	}
	schema := parquetSchema(cols)
	index := map[string]int{}
	for i, path := range schema.Columns() {
		index[strings.Join(path, "\x00")] = i
	}
	rows := make([]parquet.Row, len(evs))
	for i := range evs {
		row, err := buildRow(&evs[i], o.times[i].UnixMicro(), cols, index)
		if err != nil {
			return nil, fmt.Errorf("event %s: %w", o.events[i].ID, err)
		}
		rows[i] = row
	}
	var b bytes.Buffer
	w := parquet.NewWriter(&b, schema,
		parquet.Compression(&parquet.Snappy),
		parquet.CreatedBy("walcast-sink-s3", p.version, ""),
		parquet.KeyValueMetadata("walcast.first_id", o.first().String()),
		parquet.KeyValueMetadata("walcast.last_id", o.last().String()),
	)
	if _, err := w.WriteRows(rows); err != nil {
		return nil, fmt.Errorf("write parquet rows: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("close parquet writer: %w", err)
	}
	return b.Bytes(), nil
}

// parquetSchema is the schema of an object whose row groups have columns
// of the kinds in cols.
func parquetSchema(cols [len(rowGroups)]map[string]kind) *parquet.Schema {
	root := parquet.Group{
		"id":               parquet.String(),
		"commit_lsn":       parquet.String(),
		"xid":              parquet.Int(64),
		"commit_time":      parquet.Timestamp(parquet.Microsecond),
		"schema":           parquet.String(),
		"table":            parquet.String(),
		"op":               parquet.String(),
		"unchanged":        parquet.Optional(parquet.JSON()),
		"cascade":          parquet.Optional(parquet.Leaf(parquet.BooleanType)),
		"restart_identity": parquet.Optional(parquet.Leaf(parquet.BooleanType)),
		"columns":          parquet.Optional(parquet.JSON()),
		"replica_identity": parquet.Optional(parquet.String()),
		"before":           parquet.Optional(parquet.JSON()),
		"changes":          parquet.Optional(parquet.JSON()),
		"partition":        parquet.Optional(parquet.String()),
		"rows":             parquet.Optional(parquet.Int(64)),
	}
	for g, name := range rowGroups {
		if len(cols[g]) == 0 {
			continue
		}
		group := parquet.Group{}
		for col, k := range cols[g] {
			group[col] = k.node()
		}
		root[name] = parquet.Optional(group)
	}
	return parquet.NewSchema("walcast_event", root)
}

// parseEvent splits an envelope into its members and its row groups'.
func parseEvent(e *pluginkit.Event) (parsedEvent, error) {
	pe := parsedEvent{top: make(map[string][]byte, 16)}
	err := cdc.EachMember(e.Payload, func(name, value []byte) error {
		pe.top[string(name)] = value
		return nil
	})
	if err != nil {
		return pe, fmt.Errorf("event %s: envelope: %w", e.ID, err)
	}
	for g, name := range rowGroups {
		raw := pe.top[name]
		if len(raw) == 0 || raw[0] == 'n' {
			continue
		}
		ms := []member{}
		err := cdc.EachMember(raw, func(n, v []byte) error {
			n, err := unescapeName(n)
			ms = append(ms, member{n, v})
			return err
		})
		if err != nil {
			return pe, fmt.Errorf("event %s: %s: %w", e.ID, name, err)
		}
		pe.groups[g] = ms
	}
	return pe, nil
}

// unescapeName decodes a raw JSON member name (between its quotes).
func unescapeName(raw []byte) ([]byte, error) {
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw, nil
	}
	var s string
	if err := json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &s); err != nil {
		return nil, fmt.Errorf("member name %q: %w", raw, err)
	}
	return []byte(s), nil
}

// buildRow builds one event's row: a value for every column of the schema,
// in column order (index maps a column's path to its position).
func buildRow(pe *parsedEvent, micros int64, cols [len(rowGroups)]map[string]kind, index map[string]int) (parquet.Row, error) {
	row := make(parquet.Row, len(index))
	set := func(path string, v parquet.Value, def int) {
		i := index[path]
		row[i] = v.Level(0, def, i)
	}
	for _, name := range [...]string{"id", "commit_lsn", "schema", "table", "op"} {
		s, err := jsonString(pe.top[name])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		set(name, parquet.ByteArrayValue(s), 0)
	}
	xid, err := strconv.ParseInt(string(pe.top["xid"]), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("xid: %w", err)
	}
	set("xid", parquet.Int64Value(xid), 0)
	set("commit_time", parquet.Int64Value(micros), 0)
	optional := func(name string, k kind) error {
		raw := pe.top[name]
		if len(raw) == 0 || raw[0] == 'n' {
			set(name, parquet.NullValue(), 0)
			return nil
		}
		v, err := leafValue(raw, k)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		set(name, v, 1)
		return nil
	}
	if err := errors.Join(optional("unchanged", kindJSON), optional("cascade", kindBool), optional("restart_identity", kindBool),
		optional("columns", kindJSON), optional("replica_identity", kindString), optional("before", kindJSON), optional("changes", kindJSON),
		optional("partition", kindString), optional("rows", kindInt)); err != nil {
		return nil, err
	}
	for g, name := range rowGroups {
		if err := setGroup(set, name, pe.groups[g], pe.top[name], cols[g]); err != nil {
			return nil, err
		}
	}
	return row, nil
}

// setGroup sets the columns of one row group: all null at level 0 when the
// group is null, else each column's value, or null at level 1 when the
// event has none for it.
func setGroup(set func(string, parquet.Value, int), name string, ms []member, raw []byte, cols map[string]kind) error {
	if len(cols) == 0 {
		return nil // not in the schema
	}
	present := len(raw) > 0 && raw[0] != 'n'
	seen := make(map[string]bool, len(ms))
	for _, m := range ms {
		col := string(m.name)
		seen[col] = true
		path := name + "\x00" + col
		if m.value[0] == 'n' {
			set(path, parquet.NullValue(), 1)
			continue
		}
		v, err := leafValue(m.value, cols[col])
		if err != nil {
			return fmt.Errorf("%s.%s: %w", name, col, err)
		}
		set(path, v, 2)
	}
	for col := range cols {
		if seen[col] {
			continue
		}
		def := 0
		if present {
			def = 1
		}
		set(name+"\x00"+col, parquet.NullValue(), def)
	}
	return nil
}

// leafValue converts a raw JSON value (not null) to a column of kind k.
func leafValue(raw []byte, k kind) (parquet.Value, error) {
	switch k {
	case kindBool:
		return parquet.BooleanValue(raw[0] == 't'), nil
	case kindInt:
		n, err := strconv.ParseInt(string(raw), 10, 64)
		return parquet.Int64Value(n), err
	case kindFloat:
		f, err := strconv.ParseFloat(string(raw), 64)
		return parquet.DoubleValue(f), err
	case kindString:
		s, err := jsonString(raw)
		return parquet.ByteArrayValue(s), err
	}
	return parquet.ByteArrayValue(raw), nil
}

// jsonString decodes a JSON string, copying only when it has escapes.
func jsonString(raw []byte) ([]byte, error) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return nil, fmt.Errorf("want a JSON string, got %.40s", raw)
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw[1 : len(raw)-1], nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	return []byte(s), nil
}
