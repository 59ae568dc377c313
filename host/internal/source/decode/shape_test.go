package decode

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	pgt "github.com/walcast/walcast/host/internal/source/pgoutput/pgoutputtest"
)

// memShapes is a Shapes that outlives decoders, as the control plane's
// table does.
type memShapes struct{ recs []ShapeRecord }

func (m *memShapes) Load() ([]ShapeRecord, error) { return slices.Clone(m.recs), nil }
func (m *memShapes) Record(r ShapeRecord) error {
	for i, e := range m.recs {
		if e.RelationID == r.RelationID && e.At == r.At {
			m.recs[i] = r
			return nil
		}
	}
	m.recs = append(m.recs, r)
	return nil
}

func withPaid() *pglogrepl.RelationMessage {
	return pgt.Relation(1, "public", "orders", 'd',
		pgt.Column("id", pgtype.Int8OID, true),
		pgt.Column("status", pgtype.TextOID, false),
		pgt.Column("total", pgtype.NumericOID, false),
		pgt.Column("notes_blob", pgtype.TextOID, false),
		pgt.Column("paid", pgtype.BoolOID, false),
	)
}

// TestSchemaEventsDeterministic: pgoutput sends a Relation message at the
// start of every session, changed or not. Whichever session a stream is
// decoded in, from whichever transaction, the schema event comes at the
// same place with the same id and bytes, and an unchanged Relation
// message emits nothing.
func TestSchemaEventsDeterministic(t *testing.T) {
	insert := func(vals ...any) *pglogrepl.InsertMessage {
		return &pglogrepl.InsertMessage{RelationID: 1, Tuple: pgt.Tuple(vals...)}
	}
	// The whole stream as a first session sees it: three transactions,
	// the shape changes before the second.
	tx1 := []pglogrepl.Message{pgt.Begin(0x10, 1), pgt.Orders(1), insert("1", "a", "1", "b")}
	tx2 := []pglogrepl.Message{pgt.Begin(0x20, 2), withPaid(), insert("2", "a", "1", "b", "t")}
	tx3 := []pglogrepl.Message{pgt.Begin(0x30, 3), insert("3", "a", "1", "b", "f")}

	store := &memShapes{}
	first := newCollector(t, Options{Shapes: store})
	first.feed(slices.Concat(tx1, tx2, tx3)...)
	ops := func(c *collector) []string {
		var out []string
		for _, e := range c.events {
			out = append(out, e.ID.String()+" "+string(e.Op))
		}
		return out
	}
	want := []string{"0/10:0 insert", "0/20:0 schema", "0/20:1 insert", "0/30:0 insert"}
	if got := ops(first); !slices.Equal(got, want) {
		t.Fatalf("first session: %v, want %v", got, want)
	}
	var ev struct {
		Columns []shapeColumn `json:"columns"`
		Before  tableShape    `json:"before"`
		Changes []shapeChange `json:"changes"`
	}
	if err := json.Unmarshal(first.events[1].Payload, &ev); err != nil {
		t.Fatal(err)
	}
	if len(ev.Columns) != 5 || ev.Columns[4] != (shapeColumn{Name: "paid", Type: "bool", TypeOID: pgtype.BoolOID, TypeModifier: -1}) ||
		len(ev.Before.Columns) != 4 || !slices.Equal(ev.Changes, []shapeChange{{Change: "add_column", Column: "paid"}}) {
		t.Errorf("schema event: %s", first.events[1].Payload)
	}

	// A restart replays from the second transaction: the Relation
	// message is the session's first, yet the event is the same.
	again := newCollector(t, Options{Shapes: store})
	again.feed(slices.Concat(tx2, tx3)...)
	if got := ops(again); !slices.Equal(got, want[1:]) {
		t.Fatalf("replay from 0/20: %v, want %v", got, want[1:])
	}
	if string(again.events[0].Payload) != string(first.events[1].Payload) {
		t.Errorf("redelivered schema event differs:\n%s\n%s", again.events[0].Payload, first.events[1].Payload)
	}
	// From the third: the session's first Relation message describes
	// the shape already known, so nothing is emitted for it.
	later := newCollector(t, Options{Shapes: store})
	later.feed(pgt.Begin(0x30, 3), withPaid(), insert("3", "a", "1", "b", "f"))
	if got := ops(later); !slices.Equal(got, want[3:]) {
		t.Fatalf("replay from 0/30: %v, want %v", got, want[3:])
	}
	// Within one decoder, Reset (a reconnect) keeps the history too.
	first.d.Reset()
	n := len(first.events)
	first.feed(pgt.Begin(0x30, 3), withPaid(), insert("3", "a", "1", "b", "f"))
	if got := ops(first)[n:]; !slices.Equal(got, want[3:]) {
		t.Fatalf("after Reset: %v, want %v", got, want[3:])
	}
}

// TestDiffShapes: what each kind of change is reported as.
func TestDiffShapes(t *testing.T) {
	col := func(name string, oid uint32, mod int32, key bool) shapeColumn {
		return shapeColumn{Name: name, Type: "t", TypeOID: oid, TypeModifier: mod, Key: key}
	}
	base := tableShape{Schema: "public", Table: "t", ReplicaIdentity: "default", Columns: []shapeColumn{
		col("id", 23, -1, true), col("a", 25, -1, false), col("b", 1043, 24, false)}}
	for _, tc := range []struct {
		name  string
		after tableShape
		want  []shapeChange
	}{
		{"add", tableShape{"public", "t", "default", append(slices.Clone(base.Columns), col("c", 23, -1, false))}, []shapeChange{{Change: "add_column", Column: "c"}}},
		{"drop", tableShape{"public", "t", "default", base.Columns[:2]}, []shapeChange{{Change: "drop_column", Column: "b"}}},
		{"retype", tableShape{"public", "t", "default", []shapeColumn{base.Columns[0], base.Columns[1], col("b", 1043, 44, false)}}, []shapeChange{{Change: "alter_column_type", Column: "b", From: "t"}}},
		{"rename", tableShape{"public", "t", "default", []shapeColumn{base.Columns[0], col("a2", 25, -1, false), base.Columns[2]}}, []shapeChange{{Change: "rename_column", Column: "a2", From: "a"}}},
		{"identity", tableShape{"public", "t", "full", []shapeColumn{base.Columns[0], base.Columns[1], base.Columns[2]}}, []shapeChange{{Change: "replica_identity", From: "default"}}},
		{"key", tableShape{"public", "t", "default", []shapeColumn{col("id", 23, -1, true), col("a", 25, -1, true), base.Columns[2]}}, []shapeChange{{Change: "alter_key", Column: "a"}}},
		{"table", tableShape{"public", "u", "default", base.Columns}, []shapeChange{{Change: "rename_table", From: "public.t", To: "public.u"}}},
	} {
		if got := diffShapes(base, tc.after); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
