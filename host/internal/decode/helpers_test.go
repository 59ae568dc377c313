package decode

import (
	"encoding/binary"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walcast/walcast/host/internal/change"
)

// Hand-built pgoutput messages, as pglogrepl.Parse would return them.

type col struct {
	name string
	oid  uint32
	key  bool
}

func relMsg(id uint32, schema, table string, ident uint8, cols ...col) *pglogrepl.RelationMessage {
	m := &pglogrepl.RelationMessage{RelationID: id, Namespace: schema, RelationName: table, ReplicaIdentity: ident, ColumnNum: uint16(len(cols))}
	for _, c := range cols {
		var flags uint8
		if c.key {
			flags = 1
		}
		m.Columns = append(m.Columns, &pglogrepl.RelationMessageColumn{Flags: flags, Name: c.name, DataType: c.oid, TypeModifier: -1})
	}
	return m
}

// toast stands for pgoutput's unchanged-TOAST marker in tup.
type toastMarker struct{}

var toast = toastMarker{}

// binVal stands for a binary-format value in tup.
type binVal []byte

// tup builds a tuple: a string is a text value, nil is 'n', toast is 'u',
// a binVal is 'b'.
func tup(vals ...any) *pglogrepl.TupleData {
	t := &pglogrepl.TupleData{ColumnNum: uint16(len(vals))}
	for _, v := range vals {
		switch v := v.(type) {
		case nil:
			t.Columns = append(t.Columns, &pglogrepl.TupleDataColumn{DataType: 'n'})
		case toastMarker:
			t.Columns = append(t.Columns, &pglogrepl.TupleDataColumn{DataType: 'u'})
		case string:
			t.Columns = append(t.Columns, &pglogrepl.TupleDataColumn{DataType: 't', Length: uint32(len(v)), Data: []byte(v)})
		case binVal:
			t.Columns = append(t.Columns, &pglogrepl.TupleDataColumn{DataType: 'b', Length: uint32(len(v)), Data: v})
		}
	}
	return t
}

var testCommitTime = time.Date(2026, 11, 30, 10, 0, 0, 123456000, time.UTC)

func begin(lsn pglogrepl.LSN, xid uint32) *pglogrepl.BeginMessage {
	return &pglogrepl.BeginMessage{FinalLSN: lsn, CommitTime: testCommitTime, Xid: xid}
}

// collector decodes messages and records what was emitted.
type collector struct {
	t      *testing.T
	d      *Decoder
	events []change.Event
}

func newCollector(t *testing.T, opts Options) *collector {
	return &collector{t: t, d: New(opts)}
}

func (c *collector) emit(ev change.Event) error {
	if !json.Valid(ev.Payload) {
		c.t.Errorf("event %s: payload is not valid JSON: %s", ev.ID, ev.Payload)
	}
	if !json.Valid(ev.Key) {
		c.t.Errorf("event %s: key is not valid JSON: %s", ev.ID, ev.Key)
	}
	c.checkLayout(ev)
	c.events = append(c.events, ev)
	return nil
}

// checkLayout fails unless ev.Layout locates exactly the envelope's
// members, as a JSON decoder reads them (library mode trusts it).
func (c *collector) checkLayout(ev change.Event) {
	c.t.Helper()
	l := ev.Layout
	if !l.Set {
		return // a backfill read: library mode scans it
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(ev.Payload, &m); err != nil {
		return // reported above
	}
	part := func(r [2]int) string { return string(ev.Payload[r[0]:r[1]]) }
	if part(l.New) != string(m["new"]) || part(l.Old) != string(m["old"]) {
		c.t.Errorf("event %s: layout new %q old %q, envelope new %s old %s", ev.ID, part(l.New), part(l.Old), m["new"], m["old"])
	}
	if want, ok := m["unchanged"]; ok != (l.Unchanged[1] > 0) || (ok && part(l.Unchanged) != string(want)) {
		c.t.Errorf("event %s: layout unchanged %v, envelope %s", ev.ID, l.Unchanged, want)
	}
	var head struct {
		XID             uint32    `json:"xid"`
		CommitTime      time.Time `json:"commit_time"`
		Cascade         bool      `json:"cascade"`
		RestartIdentity bool      `json:"restart_identity"`
	}
	if err := json.Unmarshal(ev.Payload, &head); err != nil {
		c.t.Errorf("event %s: %v", ev.ID, err)
		return
	}
	if head.XID != l.XID || !head.CommitTime.Equal(l.CommitTime) || head.Cascade != l.Cascade || head.RestartIdentity != l.RestartIdentity {
		c.t.Errorf("event %s: layout %+v, envelope %+v", ev.ID, l, head)
	}
}

// feed decodes msgs and fails the test on the first error.
func (c *collector) feed(msgs ...pglogrepl.Message) {
	c.t.Helper()
	for _, m := range msgs {
		if err := c.d.Decode(m, c.emit); err != nil {
			c.t.Fatalf("Decode(%T): %v", m, err)
		}
	}
}

func (c *collector) payloads() []string {
	out := make([]string, len(c.events))
	for i, ev := range c.events {
		out[i] = string(ev.Payload)
	}
	return out
}

// Wire encoding of the same messages, for Parse tests and fuzz seeds.

func wireBegin(lsn uint64, micros int64, xid uint32) []byte {
	b := []byte{'B'}
	b = binary.BigEndian.AppendUint64(b, lsn)
	b = binary.BigEndian.AppendUint64(b, uint64(micros))
	return binary.BigEndian.AppendUint32(b, xid)
}

func wireCommit(lsn, end uint64, micros int64) []byte {
	b := []byte{'C', 0}
	b = binary.BigEndian.AppendUint64(b, lsn)
	b = binary.BigEndian.AppendUint64(b, end)
	return binary.BigEndian.AppendUint64(b, uint64(micros))
}

func wireRelation(m *pglogrepl.RelationMessage) []byte {
	b := []byte{'R'}
	b = binary.BigEndian.AppendUint32(b, m.RelationID)
	b = append(append(b, m.Namespace...), 0)
	b = append(append(b, m.RelationName...), 0)
	b = append(b, m.ReplicaIdentity)
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.Columns)))
	for _, c := range m.Columns {
		b = append(b, c.Flags)
		b = append(append(b, c.Name...), 0)
		b = binary.BigEndian.AppendUint32(b, c.DataType)
		b = binary.BigEndian.AppendUint32(b, uint32(c.TypeModifier))
	}
	return b
}

func wireTuple(b []byte, t *pglogrepl.TupleData) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(t.Columns)))
	for _, c := range t.Columns {
		b = append(b, c.DataType)
		if c.DataType == 't' || c.DataType == 'b' {
			b = binary.BigEndian.AppendUint32(b, uint32(len(c.Data)))
			b = append(b, c.Data...)
		}
	}
	return b
}

func wireInsert(rel uint32, t *pglogrepl.TupleData) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'I'}, rel)
	return wireTuple(append(b, 'N'), t)
}

func wireUpdate(rel uint32, oldKind byte, old, new *pglogrepl.TupleData) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'U'}, rel)
	if old != nil {
		b = wireTuple(append(b, oldKind), old)
	}
	return wireTuple(append(b, 'N'), new)
}

func wireDelete(rel uint32, oldKind byte, old *pglogrepl.TupleData) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'D'}, rel)
	return wireTuple(append(b, oldKind), old)
}

func wireTruncate(option byte, rels ...uint32) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'T'}, uint32(len(rels)))
	b = append(b, option)
	for _, r := range rels {
		b = binary.BigEndian.AppendUint32(b, r)
	}
	return b
}

// referenceParse parses with pglogrepl's own parser behind Parser's framing
// check: what Parser's allocation-free fast path must agree with.
func referenceParse(data []byte) (pglogrepl.Message, error) {
	return (&Parser{fallback: true}).Parse(data)
}
