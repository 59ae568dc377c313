package decode

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Options configures a Decoder. The zero value is usable.
type Options struct {
	// PrimaryKey returns the primary key column names of a table, in key
	// order, or none when it has no primary key. It is consulted only for
	// tables with REPLICA IDENTITY FULL, where pgoutput marks every column
	// as part of the key; the primary key then becomes the event key, which
	// is what sinks partition and order on. It is called once per Relation
	// message, from Decode, so it holds up the stream while it runs: keep it
	// fast and bounded (e.g. a query with a short timeout, or a map loaded at
	// startup). May be nil: the key is then every column.
	PrimaryKey func(schema, table string) ([]string, error)
	// Tables, when non-empty, are the only tables ("schema.table") whose
	// changes become events; the changes of every other relation the
	// publication sends are dropped without consuming an index, and
	// counted (Unlisted).
	Tables map[string]bool
	// Pipeline is the name backfill messages must carry to be decoded
	// (see BackfillChunk); chunks of other pipelines are ignored.
	Pipeline string
	// PartitionDeletes turns the rows of a partition detached or
	// truncated (PartitionPrefix messages) into delete events of the
	// table (source on_detach = "delete").
	PartitionDeletes bool
	// PartitionDetachEvents, with PartitionDeletes, turns a partition
	// detached into one detach event of the table instead of its rows'
	// deletes; a partition truncated still gives deletes (source
	// on_detach = "event").
	PartitionDetachEvents bool
	// Formats are the output formats written next to the envelope, into
	// each event's change.Event.Formats in this order.
	Formats []Format
	// Shapes keeps the tables' shapes across connections and restarts,
	// for schema events (shape.go). May be nil: the history is then
	// kept in memory only, and a restart forgets it (the first Relation
	// message of each table after it emits no schema event).
	Shapes Shapes
	// MessagePrefixes select the application messages
	// (pg_logical_emit_message) that become message events: those whose
	// prefix starts with one of them (message.go). Each must pass
	// pg.CheckMessagePrefix; messages of walcast's own prefixes never match.
	MessagePrefixes []string
}

// Decoder turns the pgoutput messages of one replication stream into
// events. See the package documentation for its state machine.
type Decoder struct {
	opts Options
	rels map[uint32]*relation
	// unlisted counts dropped changes of tables outside Options.Tables;
	// read by other goroutines (metrics).
	unlisted atomic.Uint64

	inTx      bool
	commitLSN uint64
	index     uint64
	// xid and commitTime are the open transaction's, for change.Layout.
	xid        uint32
	commitTime time.Time
	// txHead is the pre-encoded `"commit_lsn":…,"xid":…,"commit_time":…,`
	// part shared by every event of the transaction.
	txHead []byte

	// Reusable buffers: the envelope being built, its "unchanged" list, and
	// array elements being unescaped. Their contents never escape a Decode
	// call; emitted events get copies.
	buf       []byte
	unchanged []byte
	scratch   []byte
	oldKey    []byte // the old key of an update, to compare with the new one
	fbuf      []byte // an event in one of Options.Formats being built
	dbzParts  dbzTxParts
	// sinks are the target sinks of the backfill chunk being decoded.
	sinks []string

	// shapes is the history of each relation's shape, in position
	// order, loaded from Options.Shapes on the first Relation message;
	// types names the user-defined types pgoutput described. Neither is
	// dropped by Reset: they describe the stream, not the session.
	shapes       map[uint32][]ShapeRecord
	shapesLoaded bool
	types        map[uint32]string
	// ddlTail is the "ddl" member of the schema event being encoded
	// for a DDL message, empty otherwise.
	ddlTail []byte
	// cloudEventsUsed: Options.Formats has a cloudevents format, which
	// every event gets (markers and schema events too).
	cloudEventsUsed bool
}

// New returns a Decoder with an empty relation cache, outside any
// transaction. opts.Formats must pass CheckFormats.
func New(opts Options) *Decoder {
	d := &Decoder{opts: opts, rels: make(map[uint32]*relation), shapes: map[uint32][]ShapeRecord{}, types: map[uint32]string{}}
	for _, f := range opts.Formats {
		d.cloudEventsUsed = d.cloudEventsUsed || f.Name == FormatCloudEvents
	}
	return d
}

// Reset drops the relation cache and any open transaction. Call it whenever
// the replication connection is re-established: the server sends Relation
// messages afresh on a new connection, and a transaction cut short by the
// disconnect is replayed from its Begin.
func (d *Decoder) Reset() {
	clear(d.rels)
	d.inTx = false
	d.commitLSN = 0
	d.index = 0
	d.txHead = d.txHead[:0]
}

// Unlisted is how many changes of tables outside Options.Tables were
// dropped. Safe to call concurrently with Decode.
func (d *Decoder) Unlisted() uint64 { return d.unlisted.Load() }

// InTransaction reports whether a Begin has been decoded without its Commit.
// The capture loop must not confirm a keepalive's WAL end while it is true.
func (d *Decoder) InTransaction() bool { return d.inTx }

// CommitLSN is the commit LSN of the current transaction, or of the last one
// after its Commit; zero before the first Begin.
func (d *Decoder) CommitLSN() pglogrepl.LSN { return pglogrepl.LSN(d.commitLSN) }

// Emitted is how many events the current (or last committed) transaction has
// emitted so far, which is also the index the next event will get.
func (d *Decoder) Emitted() int { return int(d.index) }

// Decode decodes one message of the stream and calls emit for each event it
// produces: none for Begin, Commit, Type, Origin and for changes
// to the control schema, one schema event for a Relation message that
// changes a captured table's shape (none for the others), one per change, one per named relation for a
// Truncate, one read event per row of a backfill chunk message of this
// pipeline, one resync_begin or resync_end event per resync marker of
// this pipeline, one message event per application message whose prefix
// Options.MessagePrefixes selects (none for other logical decoding
// messages).
//
// emit is called synchronously; an event counts as emitted (consumes its
// index) only when emit returns nil. An error from emit is returned wrapped
// and leaves the transaction where it was; the caller is expected to
// reconnect and Reset.
//
// Passing the Commit message is optional for the events produced but it is
// what ends the transaction for InTransaction.
func (d *Decoder) Decode(msg pglogrepl.Message, emit func(change.Event) error) error {
	switch m := msg.(type) {
	case *pglogrepl.BeginMessage:
		if m == nil {
			break
		}
		d.begin(m)
		return nil
	case *pglogrepl.CommitMessage:
		if m == nil {
			break
		}
		return d.commit(m)
	case *pglogrepl.RelationMessage:
		if m == nil {
			break
		}
		rel, err := newRelation(m, d.opts.PrimaryKey)
		if err != nil {
			return fmt.Errorf("decode relation message: %w", err)
		}
		if !rel.skip && len(d.opts.Tables) > 0 && !d.opts.Tables[m.Namespace+"."+m.RelationName] {
			rel.skip, rel.unlisted = true, true
		}
		d.rels[m.RelationID] = rel
		return d.relationSeen(m, rel, emit)
	case *pglogrepl.InsertMessage:
		if m == nil {
			break
		}
		return d.insert(m, emit)
	case *pglogrepl.UpdateMessage:
		if m == nil {
			break
		}
		return d.update(m, emit)
	case *pglogrepl.DeleteMessage:
		if m == nil {
			break
		}
		return d.delete(m, emit)
	case *pglogrepl.TruncateMessage:
		if m == nil {
			break
		}
		return d.truncate(m, emit)
	case *pglogrepl.LogicalDecodingMessage:
		if m == nil {
			break
		}
		switch {
		case m.Prefix == ResyncPrefix && m.Transactional:
			return d.resync(m, emit)
		case m.Prefix == VanishedPrefix:
			return d.vanished(m, emit)
		case m.Prefix == DDLPrefix:
			return d.ddl(m, emit)
		case m.Prefix == PartitionPrefix:
			return d.partitionRows(m, emit)
		case d.messageWanted(m.Prefix):
			return d.message(m, emit)
		}
		return d.backfill(m, emit)
	case *pglogrepl.TypeMessage:
		// User-defined types are emitted as text; their names go into
		// schema events. pgoutput sends a Type message before each
		// Relation message that uses the type.
		if m != nil {
			d.types[m.DataType] = m.Namespace + "." + m.Name
		}
		return nil
	case *pglogrepl.OriginMessage:
		return nil // origins carry no rows
	default:
		return fmt.Errorf("decode: unsupported pgoutput message %T", msg)
	}
	return errors.New("decode: nil message")
}

func (d *Decoder) begin(m *pglogrepl.BeginMessage) {
	// A Begin while a transaction is open means its Commit was not passed
	// in (allowed) or the stream restarted; either way the new transaction
	// starts from scratch.
	d.inTx = true
	d.commitLSN = uint64(m.FinalLSN)
	d.index = 0
	// As the envelope says it: UTC, to the microsecond.
	d.xid, d.commitTime = m.Xid, m.CommitTime.UTC().Truncate(time.Microsecond)
	b := append(d.txHead[:0], `"commit_lsn":"`...)
	b = cdc.AppendLSN(b, d.commitLSN)
	b = append(b, `","xid":`...)
	b = strconv.AppendUint(b, uint64(m.Xid), 10)
	b = append(b, `,"commit_time":"`...)
	b = m.CommitTime.UTC().AppendFormat(b, "2006-01-02T15:04:05.000000Z07:00")
	d.txHead = append(b, `",`...)
}

func (d *Decoder) commit(m *pglogrepl.CommitMessage) error {
	if !d.inTx {
		return fmt.Errorf("decode commit %s: no transaction is open", m.CommitLSN)
	}
	if uint64(m.CommitLSN) != d.commitLSN {
		// The ids of the transaction's events were built from Begin's LSN;
		// if Commit disagrees they are wrong.
		return fmt.Errorf("decode commit: commit LSN %s does not match the begin's final LSN %s", m.CommitLSN, pglogrepl.LSN(d.commitLSN))
	}
	d.inTx = false
	return nil
}

// relationFor returns the cache entry for a change, or nil for a relation
// of the control schema, whose changes are dropped.
func (d *Decoder) relationFor(op cdc.Op, id uint32) (*relation, error) {
	if !d.inTx {
		return nil, fmt.Errorf("decode %s on relation %d: no transaction is open", op, id)
	}
	rel, ok := d.rels[id]
	if !ok {
		return nil, fmt.Errorf("decode %s: unknown relation id %d (no Relation message since the connection started)", op, id)
	}
	if rel.skip {
		if rel.unlisted {
			d.unlisted.Add(1)
		}
		return nil, nil
	}
	return rel, nil
}

func (d *Decoder) insert(m *pglogrepl.InsertMessage, emit func(change.Event) error) error {
	rel, err := d.relationFor(cdc.OpInsert, m.RelationID)
	if rel == nil {
		return err
	}
	newTuple, err := tupleColumns(rel, m.Tuple)
	if err != nil {
		return fmt.Errorf("decode insert on %s.%s: new tuple: %w", rel.schema, rel.table, err)
	}
	return d.change(rel, cdc.OpInsert, newTuple, nil, 0, emit)
}

func (d *Decoder) update(m *pglogrepl.UpdateMessage, emit func(change.Event) error) error {
	rel, err := d.relationFor(cdc.OpUpdate, m.RelationID)
	if rel == nil {
		return err
	}
	newTuple, err := tupleColumns(rel, m.NewTuple)
	if err != nil {
		return fmt.Errorf("decode update on %s.%s: new tuple: %w", rel.schema, rel.table, err)
	}
	var oldTuple []*pglogrepl.TupleDataColumn
	switch m.OldTupleType {
	case pglogrepl.UpdateMessageTupleTypeNone:
	case pglogrepl.UpdateMessageTupleTypeKey, pglogrepl.UpdateMessageTupleTypeOld:
		if oldTuple, err = tupleColumns(rel, m.OldTuple); err != nil {
			return fmt.Errorf("decode update on %s.%s: old tuple: %w", rel.schema, rel.table, err)
		}
	default:
		return fmt.Errorf("decode update on %s.%s: unknown old tuple type %q", rel.schema, rel.table, m.OldTupleType)
	}
	return d.change(rel, cdc.OpUpdate, newTuple, oldTuple, m.OldTupleType, emit)
}

func (d *Decoder) delete(m *pglogrepl.DeleteMessage, emit func(change.Event) error) error {
	rel, err := d.relationFor(cdc.OpDelete, m.RelationID)
	if rel == nil {
		return err
	}
	if m.OldTupleType != pglogrepl.DeleteMessageTupleTypeKey && m.OldTupleType != pglogrepl.DeleteMessageTupleTypeOld {
		return fmt.Errorf("decode delete on %s.%s: unknown old tuple type %q", rel.schema, rel.table, m.OldTupleType)
	}
	oldTuple, err := tupleColumns(rel, m.OldTuple)
	if err != nil {
		return fmt.Errorf("decode delete on %s.%s: old tuple: %w", rel.schema, rel.table, err)
	}
	return d.change(rel, cdc.OpDelete, nil, oldTuple, m.OldTupleType, emit)
}

func (d *Decoder) truncate(m *pglogrepl.TruncateMessage, emit func(change.Event) error) error {
	// Resolve every relation first so that an unknown id fails the message
	// before any of its events is emitted.
	for _, id := range m.RelationIDs {
		if _, err := d.relationFor(cdc.OpTruncate, id); err != nil {
			return err
		}
	}
	cascade := m.Option&pglogrepl.TruncateOptionCascade != 0
	restart := m.Option&pglogrepl.TruncateOptionRestartIdentity != 0
	for _, id := range m.RelationIDs {
		rel := d.rels[id]
		if rel.skip {
			continue // counted by relationFor above
		}
		if err := d.truncateEvent(rel, cascade, restart, emit); err != nil {
			return err
		}
	}
	return nil
}

// emit hands the envelope in d.buf to the caller as an event that owns a
// copy of it; key is the span of the key JSON inside the envelope.
func (d *Decoder) emit(rel *relation, op cdc.Op, keyStart, keyEnd int, oldKey []byte, lay change.Layout, formats []change.Encoded, emit func(change.Event) error) error {
	if emit == nil {
		return fmt.Errorf("decode %s on %s.%s: nil emit function", op, rel.schema, rel.table)
	}
	// One allocation per event: Key is a capacity-limited window into the
	// payload, where the key object appears verbatim. A big envelope is
	// handed over as it is instead of copied, and not kept for reuse: one
	// row of hundreds of MB must cost that once, not twice and then for
	// good.
	var payload []byte
	if len(d.buf) > bigEnvelope {
		payload, d.buf = d.buf, nil
	} else {
		payload = make([]byte, len(d.buf))
		copy(payload, d.buf)
	}
	ev := change.Event{Event: cdc.Event{
		ID:      cdc.EventID{CommitLSN: d.commitLSN, Index: d.index},
		Schema:  rel.schema,
		Table:   rel.table,
		Op:      op,
		Key:     payload[keyStart:keyEnd:keyEnd],
		Payload: payload,
	}, Sinks: d.sinks, Formats: formats}
	lay.Set, lay.XID, lay.CommitTime = true, d.xid, d.commitTime
	ev.Layout = lay
	if oldKey != nil {
		ev.OldKey = bytes.Clone(oldKey)
	}
	ev.Formats = d.cloudEvents(ev.Formats, ev.Event, ev.OldKey)
	if err := emit(ev); err != nil {
		return fmt.Errorf("emit event %s (%s on %s.%s): %w", ev.ID, op, rel.schema, rel.table, err)
	}
	d.index++
	return nil
}

// bigEnvelope is the size from which an envelope gets a buffer of its own.
const bigEnvelope = 4 << 20

// tupleColumns checks that a tuple fits the relation so that encoding it
// cannot fail half-way: one entry per column, each null, unchanged TOAST or
// text. Binary values appear only when replication is started with the
// binary option, which walcast never sets.
func tupleColumns(rel *relation, t *pglogrepl.TupleData) ([]*pglogrepl.TupleDataColumn, error) {
	if t == nil {
		return nil, errors.New("tuple missing")
	}
	if len(t.Columns) != len(rel.cols) {
		return nil, fmt.Errorf("tuple has %d columns, the relation message described %d", len(t.Columns), len(rel.cols))
	}
	for i, c := range t.Columns {
		if c == nil {
			return nil, fmt.Errorf("column %s: missing", rel.cols[i].quoted)
		}
		switch c.DataType {
		case pglogrepl.TupleDataTypeNull, pglogrepl.TupleDataTypeToast, pglogrepl.TupleDataTypeText:
		case pglogrepl.TupleDataTypeBinary:
			return nil, fmt.Errorf("column %s: binary format is not supported (start replication without the binary option)", rel.cols[i].quoted)
		default:
			return nil, fmt.Errorf("column %s: unknown tuple data kind %q", rel.cols[i].quoted, c.DataType)
		}
	}
	return t.Columns, nil
}
