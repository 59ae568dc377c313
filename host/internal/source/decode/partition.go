package decode

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/jackc/pglogrepl"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// PartitionPrefix is the prefix of the transactional logical decoding
// messages walcast's partition triggers write when rows leave a captured
// partitioned table without PostgreSQL publishing their deletes: a
// partition DETACHed (the ddl_events event trigger, at the end of the
// command) or one partition truncated (a statement trigger BEFORE
// TRUNCATE on each partition). The payload is a PartitionRows as JSON. It
// is written in the command's transaction, with the partition locked by
// the command, so its rows are exactly those the table loses at the
// command's commit.
const PartitionPrefix = "walcast.partition"

// PartitionRows is the payload of a PartitionPrefix message: the keys of
// the rows that left the table, read by the trigger, in the chunk shape
// a backfill writes (BackfillChunk, its Rows as JSON) with only the key's
// columns.
type PartitionRows struct {
	BackfillChunk
	// Partition is the partition ("schema.table"), Command what removed
	// its rows: "detach" or "truncate".
	Partition string `json:"partition"`
	Command   string `json:"command"`
	// Full: the table has REPLICA IDENTITY FULL and no primary key, so
	// the rows are whole (every column the key), as PostgreSQL's old
	// tuple of a delete of it is.
	Full bool `json:"full,omitempty"`
}

// The values of PartitionRows.Command.
const (
	PartitionDetach   = "detach"
	PartitionTruncate = "truncate"
)

// partitionRows turns a PartitionPrefix message of this pipeline into a
// delete event of the listed table per row, in the message's order, at
// the message's place in the transaction, when the pipeline asks for them
// (Options.PartitionDeletes; on_detach = "delete"), or, for a DETACH under
// Options.PartitionDetachEvents (on_detach = "event"), into one detach
// event of the table at that place.
func (d *Decoder) partitionRows(m *pglogrepl.LogicalDecodingMessage, emit func(change.Event) error) error {
	if !m.Transactional || !d.opts.PartitionDeletes {
		return nil
	}
	if !d.inTx {
		return fmt.Errorf("decode partition message at %s: no transaction is open", m.LSN)
	}
	var p PartitionRows
	if err := json.Unmarshal(m.Content, &p); err != nil {
		return fmt.Errorf("decode partition message at %s: %w", m.LSN, err)
	}
	if p.Pipeline != d.opts.Pipeline || (len(d.opts.Tables) > 0 && !d.opts.Tables[p.Schema+"."+p.Table]) {
		return nil
	}
	if p.Command == PartitionDetach && d.opts.PartitionDetachEvents {
		return d.detachEvent(&p, emit)
	}
	if len(p.Columns) == 0 {
		// A table without a key (REPLICA IDENTITY NOTHING, or DEFAULT
		// without a primary key): the message only counts the rows, for
		// a detach event; there is nothing to delete by. The trigger
		// left the partition on record, so the watch loop says so.
		return nil
	}
	rel, err := chunkRelation(&p.BackfillChunk)
	if err != nil {
		return fmt.Errorf("decode the rows of partition %s of %s.%s (%s): %w", p.Partition, p.Schema, p.Table, p.Command, err)
	}
	cols := make([]pglogrepl.TupleDataColumn, len(p.Columns))
	tuple := make([]*pglogrepl.TupleDataColumn, len(p.Columns))
	for i := range cols {
		tuple[i] = &cols[i]
	}
	for n, row := range p.Rows {
		if len(row) != len(cols) {
			return fmt.Errorf("decode the rows of partition %s: row %d has %d values for %d columns", p.Partition, n, len(row), len(cols))
		}
		for i, v := range row {
			if v == nil {
				cols[i] = pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeNull}
			} else {
				cols[i] = pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Length: uint32(len(*v)), Data: []byte(*v)}
			}
		}
		// As PostgreSQL sends a delete under the default replica
		// identity: the key's columns as the old tuple; or, for REPLICA
		// IDENTITY FULL without a primary key (Full), the old row whole,
		// where 'n' is a NULL and not "not in the key".
		kind := uint8(pglogrepl.DeleteMessageTupleTypeKey)
		if p.Full {
			kind = pglogrepl.DeleteMessageTupleTypeOld
		}
		if err := d.change(rel, cdc.OpDelete, nil, tuple, kind, emit); err != nil {
			return err
		}
	}
	return nil
}

// detachEvent encodes and emits the one detach event of a partition
// DETACHed from the table. Its envelope is a truncate's without the
// truncate's options, with the partition's name and the number of rows it
// took out of the table (the message lists their keys anyway):
//
//	{"id":…,"commit_lsn":…,"xid":…,"commit_time":…,"schema":…,"table":…,
//	 "op":"detach","key":null,"new":null,"old":null,
//	 "partition":"public.items_2026","rows":5000}
//
// Like a truncate it is a barrier for its table (cdc.Op.TableWide). No
// format has a shape for it: every sink gets walcast's envelope
// (docs/formats.md).
func (d *Decoder) detachEvent(p *PartitionRows, emit func(change.Event) error) error {
	rel := tableRelation(p.Schema, p.Table)

	b := d.appendHead(d.buf[:0], rel, cdc.OpDetach)
	var lay change.Layout
	b, keyStart, keyEnd := appendNoRow(b, &lay)
	b = append(b, `,"partition":`...)
	b = appendJSONString(b, []byte(p.Partition))
	b = append(b, `,"rows":`...)
	b = strconv.AppendInt(b, int64(len(p.Rows)), 10)
	d.buf = append(b, '}')
	return d.emit(rel, cdc.OpDetach, keyStart, keyEnd, nil, lay, nil, emit)
}
