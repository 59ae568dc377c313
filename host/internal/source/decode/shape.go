package decode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// ShapeRecord is a table's shape as a Relation message described it at a
// position of the stream: At is the id of the schema event the change of
// shape produced, or, for the first shape known of the relation, the id
// the next event of the transaction would get (no event is emitted then).
type ShapeRecord struct {
	RelationID uint32
	At         cdc.EventID
	// Shape is the JSON of the shape: schema, table, replica_identity,
	// columns (see docs/events.md, "Schema events").
	Shape []byte
}

// Shapes keeps the history of shapes across connections and restarts,
// so that whether a Relation message is a change of shape, and hence
// whether a schema event is emitted and which id the events after it
// get, depends only on the stream and not on where a session began
// (pgoutput sends a Relation message before the first change of each
// relation in every session, changed or not).
type Shapes interface {
	// Load returns every record kept, in any order.
	Load() ([]ShapeRecord, error)
	// Record stores rec durably, replacing a record of the same relation
	// at the same position. It returns before the event at rec.At is
	// emitted, so the slot can never be confirmed past an event whose
	// shape is not kept.
	Record(rec ShapeRecord) error
}

// tableShape is what a schema event says about a table.
type tableShape struct {
	Schema          string        `json:"schema"`
	Table           string        `json:"table"`
	ReplicaIdentity string        `json:"replica_identity"`
	Columns         []shapeColumn `json:"columns"`
}

type shapeColumn struct {
	Name string `json:"name"`
	// Type is pg_type.typname for built-in types, "schema.name" for
	// types pgoutput described in a Type message, else the OID.
	Type         string `json:"type"`
	TypeOID      uint32 `json:"type_oid"`
	TypeModifier int32  `json:"type_modifier"`
	// Key: the column is part of the replica identity, as pgoutput flags
	// it (every column with REPLICA IDENTITY FULL). Not the events' key,
	// which for FULL is the primary key looked up when decoding: a shape
	// must depend on the stream alone, or whether a schema event is
	// emitted, and the ids after it, would depend on when it is decoded.
	Key bool `json:"key"`
}

// shapeChange is one entry of a schema event's "changes".
type shapeChange struct {
	Change string `json:"change"`
	Column string `json:"column,omitempty"`
	From   string `json:"from,omitempty"`
	To     string `json:"to,omitempty"`
}

// replicaIdentityNames spells pg_class.relreplident.
var replicaIdentityNames = map[uint8]string{'d': "default", 'n': "nothing", 'f': "full", 'i': "index"}

// builtinTypes names the built-in types by OID.
var builtinTypes = pgtype.NewMap()

// shapeOf describes m as a schema event does.
func (d *Decoder) shapeOf(m *pglogrepl.RelationMessage) tableShape {
	s := tableShape{Schema: m.Namespace, Table: m.RelationName, ReplicaIdentity: replicaIdentityNames[m.ReplicaIdentity]}
	if s.ReplicaIdentity == "" {
		s.ReplicaIdentity = string(rune(m.ReplicaIdentity))
	}
	s.Columns = make([]shapeColumn, len(m.Columns))
	for i, c := range m.Columns {
		s.Columns[i] = shapeColumn{Name: c.Name, Type: d.typeName(c.DataType), TypeOID: c.DataType, TypeModifier: c.TypeModifier, Key: c.Flags&1 != 0}
	}
	return s
}

func (d *Decoder) typeName(oid uint32) string {
	if n, ok := d.types[oid]; ok {
		return n
	}
	if t, ok := builtinTypes.TypeForOID(oid); ok {
		return t.Name
	}
	return strconv.FormatUint(uint64(oid), 10)
}

// loadShapes reads the history once, on the first Relation message.
func (d *Decoder) loadShapes() error {
	if d.shapesLoaded {
		return nil
	}
	if d.opts.Shapes != nil {
		recs, err := d.opts.Shapes.Load()
		if err != nil {
			return fmt.Errorf("load the shapes of the captured tables: %w", err)
		}
		for _, r := range recs {
			d.remember(r)
		}
	}
	d.shapesLoaded = true
	return nil
}

// remember puts r into the in-memory history, in position order.
func (d *Decoder) remember(r ShapeRecord) {
	h := d.shapes[r.RelationID]
	i, found := slices.BinarySearchFunc(h, r.At, func(e ShapeRecord, at cdc.EventID) int { return e.At.Compare(at) })
	if found {
		h[i] = r
		return
	}
	d.shapes[r.RelationID] = slices.Insert(h, i, r)
}

// shapeBefore is the last shape known of a relation before position at.
func (d *Decoder) shapeBefore(id uint32, at cdc.EventID) (ShapeRecord, bool) {
	h := d.shapes[id]
	i, _ := slices.BinarySearchFunc(h, at, func(e ShapeRecord, at cdc.EventID) int { return e.At.Compare(at) })
	if i == 0 {
		return ShapeRecord{}, false
	}
	return h[i-1], true
}

// relationSeen compares the shape a Relation message describes with the
// last one known before this position of the stream and emits a schema
// event when they differ. The first shape known of a relation is a
// baseline: recorded, no event.
func (d *Decoder) relationSeen(m *pglogrepl.RelationMessage, rel *relation, emit func(change.Event) error) error {
	if rel.skip || !d.inTx {
		return nil
	}
	if err := d.loadShapes(); err != nil {
		return err
	}
	shape := d.shapeOf(m)
	b, err := json.Marshal(shape)
	if err != nil {
		return fmt.Errorf("encode the shape of %s.%s: %w", m.Namespace, m.RelationName, err)
	}
	at := cdc.EventID{CommitLSN: d.commitLSN, Index: d.index}
	prev, known := d.shapeBefore(m.RelationID, at)
	if known && bytes.Equal(prev.Shape, b) {
		return nil
	}
	rec := ShapeRecord{RelationID: m.RelationID, At: at, Shape: b}
	if d.opts.Shapes != nil {
		if err := d.opts.Shapes.Record(rec); err != nil {
			return fmt.Errorf("record the shape of %s.%s at %s: %w", m.Namespace, m.RelationName, at, err)
		}
	}
	d.remember(rec)
	if !known {
		return nil
	}
	var before tableShape
	if err := json.Unmarshal(prev.Shape, &before); err != nil {
		return fmt.Errorf("read the shape of %s.%s recorded at %s: %w", m.Namespace, m.RelationName, prev.At, err)
	}
	return d.schemaEventWith(rel, shape, prev.Shape, diffShapes(before, shape), emit)
}

// schemaEventWith encodes and emits a schema event:
//
//	{…,"op":"schema","key":null,"new":null,"old":null,
//	 "columns":[…],"replica_identity":…,"before":{…},"changes":[…]}
func (d *Decoder) schemaEventWith(rel *relation, after tableShape, beforeJSON []byte, diff []shapeChange, emit func(change.Event) error) error {
	cols, err := json.Marshal(after.Columns)
	if err != nil {
		return fmt.Errorf("encode the columns of %s.%s: %w", rel.schema, rel.table, err)
	}
	changes, err := json.Marshal(diff)
	if err != nil {
		return fmt.Errorf("encode the changes of %s.%s: %w", rel.schema, rel.table, err)
	}
	b := d.appendHead(d.buf[:0], rel, cdc.OpSchema)
	var lay change.Layout
	b, keyStart, keyEnd := appendNoRow(b, &lay)
	b = append(b, `,"columns":`...)
	b = append(b, cols...)
	b = append(b, `,"replica_identity":`...)
	b = strconv.AppendQuote(b, after.ReplicaIdentity)
	b = append(b, `,"before":`...)
	b = append(b, beforeJSON...)
	b = append(b, `,"changes":`...)
	b = append(b, changes...)
	b = append(b, d.ddlTail...)
	d.buf = append(b, '}')
	// No format has a shape for it: every sink gets walcast's envelope
	// (docs/formats.md).
	return d.emit(rel, cdc.OpSchema, keyStart, keyEnd, nil, lay, nil, emit)
}

// diffShapes says what changed from before to after. pgoutput does not
// say which column became which, so a rename is inferred: a column that
// is gone and one that is new at the same position, of the same type,
// with the number of columns unchanged.
func diffShapes(before, after tableShape) []shapeChange {
	out := []shapeChange{}
	if before.Schema != after.Schema || before.Table != after.Table {
		out = append(out, shapeChange{Change: "rename_table", From: before.Schema + "." + before.Table, To: after.Schema + "." + after.Table})
	}
	old := map[string]shapeColumn{}
	for _, c := range before.Columns {
		old[c.Name] = c
	}
	now := map[string]bool{}
	for _, c := range after.Columns {
		now[c.Name] = true
	}
	renamed := map[string]bool{}
	for i, c := range after.Columns {
		p, ok := old[c.Name]
		switch {
		case ok && (p.TypeOID != c.TypeOID || p.TypeModifier != c.TypeModifier):
			out = append(out, shapeChange{Change: "alter_column_type", Column: c.Name, From: p.Type})
		case !ok && len(before.Columns) == len(after.Columns) && !now[before.Columns[i].Name] &&
			before.Columns[i].TypeOID == c.TypeOID && before.Columns[i].TypeModifier == c.TypeModifier:
			out = append(out, shapeChange{Change: "rename_column", Column: c.Name, From: before.Columns[i].Name})
			renamed[before.Columns[i].Name] = true
			p, ok = before.Columns[i], true
		case !ok:
			out = append(out, shapeChange{Change: "add_column", Column: c.Name})
		}
		if ok && p.Key != c.Key {
			out = append(out, shapeChange{Change: "alter_key", Column: c.Name})
		}
	}
	for _, c := range before.Columns {
		if !now[c.Name] && !renamed[c.Name] {
			out = append(out, shapeChange{Change: "drop_column", Column: c.Name})
		}
	}
	if before.ReplicaIdentity != after.ReplicaIdentity {
		out = append(out, shapeChange{Change: "replica_identity", From: before.ReplicaIdentity})
	}
	return out
}
