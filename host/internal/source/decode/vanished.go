package decode

import (
	"encoding/json"
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/walcast/walcast/host/internal/change"
)

// VanishedPrefix is the prefix of the transactional logical decoding
// messages by which a running capture says that a table its pipeline
// lists was dropped, or renamed to a name the pipeline does not list
// (package capture writes them before it stops for that). PostgreSQL
// decodes nothing for a DROP TABLE and publishes a renamed table's
// changes under its new name, so without this message a sink would never
// hear of either: it becomes a schema event at the message's place in the
// stream.
const VanishedPrefix = "walcast.vanished"

// Vanished is the content of a VanishedPrefix message.
type Vanished struct {
	Pipeline string `json:"pipeline"`
	// Schema and Table are the name the pipeline lists.
	Schema string `json:"schema"`
	Table  string `json:"table"`
	// RenamedTo is the table's new "schema.table", empty when it is gone
	// (dropped, or no longer published).
	RenamedTo string `json:"renamed_to,omitempty"`
}

// vanished turns a VanishedPrefix message of this pipeline into a schema
// event of the table under the name the pipeline lists: for a rename,
// its columns as last known and a rename_table change; for a table gone,
// no columns and a drop_table change. "before" is the last shape known.
func (d *Decoder) vanished(m *pglogrepl.LogicalDecodingMessage, emit func(change.Event) error) error {
	if !m.Transactional || !d.inTx {
		return nil
	}
	var v Vanished
	if err := json.Unmarshal(m.Content, &v); err != nil {
		return fmt.Errorf("decode vanished-table message at %s: %w", m.LSN, err)
	}
	if v.Pipeline != d.opts.Pipeline {
		return nil
	}
	if err := d.loadShapes(); err != nil {
		return err
	}
	before, known := d.lastShapeNamed(v.Schema, v.Table)
	beforeJSON := []byte("null")
	if known {
		b, err := json.Marshal(before)
		if err != nil {
			return fmt.Errorf("encode the shape of %s.%s: %w", v.Schema, v.Table, err)
		}
		beforeJSON = b
	}
	after := tableShape{Schema: v.Schema, Table: v.Table, ReplicaIdentity: before.ReplicaIdentity}
	changes := []shapeChange{{Change: "drop_table"}}
	if v.RenamedTo != "" {
		after.Columns = before.Columns
		changes = []shapeChange{{Change: "rename_table", From: v.Schema + "." + v.Table, To: v.RenamedTo}}
	}
	rel := tableRelation(v.Schema, v.Table)
	return d.schemaEventWith(rel, after, beforeJSON, changes, emit)
}

// lastShapeNamed is the last shape known of the table named schema.table
// (by the name it had then).
func (d *Decoder) lastShapeNamed(schema, table string) (tableShape, bool) {
	var best ShapeRecord
	found := false
	for _, h := range d.shapes {
		if len(h) == 0 {
			continue
		}
		last := h[len(h)-1]
		var s tableShape
		if json.Unmarshal(last.Shape, &s) != nil || s.Schema != schema || s.Table != table {
			continue
		}
		if !found || best.At.Compare(last.At) < 0 {
			best, found = last, true
		}
	}
	var s tableShape
	if found {
		_ = json.Unmarshal(best.Shape, &s) // parsed above
	}
	return s, found
}
