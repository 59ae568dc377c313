package decode

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"

	"github.com/jackc/pglogrepl"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/host/internal/pg"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// BackfillPrefix is the prefix of the transactional logical decoding
// messages a backfill writes into the WAL, one per chunk of rows
// (pg_logical_emit_message(true, BackfillPrefix, payload)). The payload is
// the chunk's BackfillChunk as JSON without Rows, a newline, then the rows:
// each row's values in Columns order, each value a 4-byte big-endian
// length and that many bytes, or the length 0xFFFFFFFF for NULL
// (AppendBackfillValue). Values need no escaping that way and decode
// without allocating (as JSON they were the host's largest cost per read
// row: docs/benchmarks.md, "Backfill path"). A payload without a newline
// is a BackfillChunk as JSON with Rows, as earlier versions wrote it, and
// still decodes.
const BackfillPrefix = "walcast.backfill"

// AppendBackfillValue appends one value of a chunk's rows section: v in
// the text format pgoutput uses, nil for NULL.
func AppendBackfillValue(b, v []byte) []byte {
	if v == nil {
		return binary.BigEndian.AppendUint32(b, math.MaxUint32)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}

// BackfillChunk is the payload of one backfill message: the rows of one
// chunk as the transaction that wrote the message read them, with
// everything needed to turn them into events. Decoding depends on nothing
// but these bytes, so a chunk replayed from the slot yields the same
// events every time.
type BackfillChunk struct {
	// Pipeline is the pipeline that asked; other pipelines' slots on the
	// same database see the message too and ignore it.
	Pipeline string `json:"pipeline"`
	// Backfill is the backfill's id in walcast.backfills, Chunk the
	// chunk's number within it (from 1).
	Backfill int64 `json:"backfill"`
	Chunk    int64 `json:"chunk"`
	// Sinks are the sinks the rows are for; empty means every sink.
	Sinks  []string `json:"sinks,omitempty"`
	Schema string   `json:"schema"`
	Table  string   `json:"table"`
	// Columns are the published columns in table order.
	Columns []BackfillColumn `json:"columns"`
	// Key holds the indexes into Columns of the event key, in the order
	// live events of the table build theirs.
	Key []int `json:"key"`
	// Rows are the rows' values in the text format pgoutput uses (the
	// type's output function, the session settings capture sets); nil is
	// NULL.
	Rows [][]*string `json:"rows,omitempty"`
}

// BackfillColumn describes one column of a chunk.
type BackfillColumn struct {
	Name string `json:"name"`
	Type uint32 `json:"type"`
	// Typmod is the column's type modifier (pg_attribute.atttypmod), which
	// the debezium format needs for numeric scales and time precisions;
	// absent in chunks written before it existed (read as -1).
	Typmod *int32 `json:"typmod,omitempty"`
}

// backfill decodes a logical decoding message: the chunk of a backfill of
// this pipeline becomes one read event per row, in the chunk's order.
// Anything else (other prefixes, non-transactional messages, other
// pipelines' chunks) carries no rows for us.
func (d *Decoder) backfill(m *pglogrepl.LogicalDecodingMessage, emit func(change.Event) error) error {
	if m.Prefix != BackfillPrefix || !m.Transactional {
		return nil
	}
	if !d.inTx {
		return fmt.Errorf("decode backfill message at %s: no transaction is open", m.LSN)
	}
	head, rows, packed := bytes.Cut(m.Content, []byte{'\n'})
	var c BackfillChunk
	if err := json.Unmarshal(head, &c); err != nil {
		return fmt.Errorf("decode backfill message at %s: %w", m.LSN, err)
	}
	if c.Pipeline != d.opts.Pipeline {
		return nil
	}
	rel, err := chunkRelation(&c)
	if err != nil {
		return fmt.Errorf("decode backfill %d chunk %d of %s.%s: %w", c.Backfill, c.Chunk, c.Schema, c.Table, err)
	}
	cols := make([]pglogrepl.TupleDataColumn, len(c.Columns))
	tuple := make([]*pglogrepl.TupleDataColumn, len(c.Columns))
	for i := range cols {
		tuple[i] = &cols[i]
	}
	d.sinks = c.Sinks
	if len(d.sinks) == 0 {
		d.sinks = nil
	}
	defer func() { d.sinks = nil }()
	if packed {
		for n := 0; len(rows) > 0; n++ {
			for i := range cols {
				if len(rows) < 4 {
					return fmt.Errorf("decode backfill %d chunk %d: row %d is cut short", c.Backfill, c.Chunk, n)
				}
				l := binary.BigEndian.Uint32(rows)
				rows = rows[4:]
				if l == math.MaxUint32 {
					cols[i] = pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeNull}
					continue
				}
				if uint64(l) > uint64(len(rows)) {
					return fmt.Errorf("decode backfill %d chunk %d: row %d is cut short", c.Backfill, c.Chunk, n)
				}
				cols[i] = pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Length: l, Data: rows[:l:l]}
				rows = rows[l:]
			}
			if err := d.change(rel, cdc.OpRead, tuple, nil, 0, emit); err != nil {
				return err
			}
		}
		return nil
	}
	for n, row := range c.Rows {
		if len(row) != len(cols) {
			return fmt.Errorf("decode backfill %d chunk %d: row %d has %d values for %d columns", c.Backfill, c.Chunk, n, len(row), len(cols))
		}
		for i, v := range row {
			if v == nil {
				cols[i] = pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeNull}
			} else {
				cols[i] = pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Length: uint32(len(*v)), Data: []byte(*v)}
			}
		}
		if err := d.change(rel, cdc.OpRead, tuple, nil, 0, emit); err != nil {
			return err
		}
	}
	return nil
}

// chunkRelation builds the relation a chunk's rows are encoded with, the
// same way a Relation message would, so that read events look exactly like
// the table's other events.
func chunkRelation(c *BackfillChunk) (*relation, error) {
	m := &pglogrepl.RelationMessage{Namespace: c.Schema, RelationName: c.Table, ReplicaIdentity: 'd'}
	for _, col := range c.Columns {
		typmod := int32(-1)
		if col.Typmod != nil {
			typmod = *col.Typmod
		}
		m.Columns = append(m.Columns, &pglogrepl.RelationMessageColumn{Name: col.Name, DataType: col.Type, TypeModifier: typmod})
	}
	rel, err := newRelation(m, nil)
	if err != nil {
		return nil, err
	}
	if rel.skip {
		return nil, fmt.Errorf("the %s schema is never captured", pg.ControlSchema)
	}
	for _, k := range c.Key {
		if k < 0 || k >= len(rel.cols) {
			return nil, fmt.Errorf("key column index %d out of range", k)
		}
		rel.cols[k].identity = true
	}
	if len(c.Key) == 0 {
		return nil, fmt.Errorf("no key columns")
	}
	rel.keyCols = c.Key
	return rel, nil
}

// ParseBackfillChunk reads a backfill message's payload, either format,
// into a BackfillChunk with its Rows (for tools and tests that inspect the
// WAL; the decoder reads the rows without copying them).
func ParseBackfillChunk(content []byte) (BackfillChunk, error) {
	head, rows, packed := bytes.Cut(content, []byte{'\n'})
	var c BackfillChunk
	if err := json.Unmarshal(head, &c); err != nil {
		return c, fmt.Errorf("read backfill chunk: %w", err)
	}
	if !packed {
		return c, nil
	}
	for len(rows) > 0 {
		row := make([]*string, len(c.Columns))
		for i := range row {
			if len(rows) < 4 {
				return c, fmt.Errorf("read backfill chunk %d: row %d is cut short", c.Chunk, len(c.Rows))
			}
			l := binary.BigEndian.Uint32(rows)
			rows = rows[4:]
			if l == math.MaxUint32 {
				continue
			}
			if uint64(l) > uint64(len(rows)) {
				return c, fmt.Errorf("read backfill chunk %d: row %d is cut short", c.Chunk, len(c.Rows))
			}
			v := string(rows[:l])
			row[i] = &v
			rows = rows[l:]
		}
		c.Rows = append(c.Rows, row)
	}
	return c, nil
}
