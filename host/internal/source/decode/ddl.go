package decode

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/jackc/pglogrepl"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// DDLPrefix is the prefix of the transactional logical decoding messages
// that walcast's event trigger (source ddl_events) writes at the end of
// each DDL command on a table: the table's shape right after the command,
// with the command's tag and statement. pgoutput describes a table only
// before its next row change, so without it a change of shape with no
// later write would reach no sink.
const DDLPrefix = "walcast.ddl"

// DDLCommand is the content of a DDLPrefix message.
type DDLCommand struct {
	Pipeline   string `json:"pipeline"`
	RelationID uint32 `json:"relation_id"`
	Schema     string `json:"schema"`
	Table      string `json:"table"`
	CommandTag string `json:"command_tag"`
	Statement  string `json:"statement"`
	// ReplicaIdentity is pg_class.relreplident.
	ReplicaIdentity string `json:"replica_identity"`
	// Columns carry Type only for types pgoutput would describe in a
	// Type message (OID 10000 and up), as "schema.name".
	Columns []shapeColumn `json:"columns"`
}

// ddl turns a DDLPrefix message of this pipeline into a schema event of a
// captured table at the message's place, when the table's shape differs
// from the last one known before it (a first shape known is reported
// too, with "before" null: the command is what the consumer must hear
// of). The shape is recorded, so the Relation message that precedes the
// table's next change finds it unchanged and emits nothing more.
func (d *Decoder) ddl(m *pglogrepl.LogicalDecodingMessage, emit func(change.Event) error) error {
	if !m.Transactional || !d.inTx {
		return nil
	}
	var c DDLCommand
	if err := json.Unmarshal(m.Content, &c); err != nil {
		return fmt.Errorf("decode DDL message at %s: %w", m.LSN, err)
	}
	if c.Pipeline != d.opts.Pipeline || c.Schema == "walcast" || (len(d.opts.Tables) > 0 && !d.opts.Tables[c.Schema+"."+c.Table]) {
		return nil
	}
	if err := d.loadShapes(); err != nil {
		return err
	}
	shape := tableShape{Schema: c.Schema, Table: c.Table, ReplicaIdentity: replicaIdentityNames[firstByte(c.ReplicaIdentity)], Columns: c.Columns}
	for i, col := range shape.Columns {
		if col.Type != "" {
			d.types[col.TypeOID] = col.Type
		}
		shape.Columns[i].Type = d.typeName(col.TypeOID)
	}
	b, err := json.Marshal(shape)
	if err != nil {
		return fmt.Errorf("encode the shape of %s.%s: %w", c.Schema, c.Table, err)
	}
	at := cdc.EventID{CommitLSN: d.commitLSN, Index: d.index}
	prev, known := d.shapeBefore(c.RelationID, at)
	if known && string(prev.Shape) == string(b) {
		return nil
	}
	rec := ShapeRecord{RelationID: c.RelationID, At: at, Shape: b}
	if d.opts.Shapes != nil {
		if err := d.opts.Shapes.Record(rec); err != nil {
			return fmt.Errorf("record the shape of %s.%s at %s: %w", c.Schema, c.Table, at, err)
		}
	}
	d.remember(rec)
	beforeJSON, diff := []byte("null"), []shapeChange{}
	if known {
		var before tableShape
		if err := json.Unmarshal(prev.Shape, &before); err != nil {
			return fmt.Errorf("read the shape of %s.%s recorded at %s: %w", c.Schema, c.Table, prev.At, err)
		}
		beforeJSON, diff = prev.Shape, diffShapes(before, shape)
	}
	rel := tableRelation(c.Schema, c.Table)
	d.ddlTail = appendDDLMember(d.ddlTail[:0], c)
	defer func() { d.ddlTail = d.ddlTail[:0] }()
	return d.schemaEventWith(rel, shape, beforeJSON, diff, emit)
}

// appendDDLMember appends `,"ddl":{"command_tag":…,"statement":…}`.
func appendDDLMember(b []byte, c DDLCommand) []byte {
	b = append(b, `,"ddl":{"command_tag":`...)
	b = strconv.AppendQuote(b, c.CommandTag)
	b = append(b, `,"statement":`...)
	b = appendJSONString(b, []byte(c.Statement))
	return append(b, '}')
}

func firstByte(s string) uint8 {
	if s == "" {
		return 0
	}
	return s[0]
}
