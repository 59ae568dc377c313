package decode

import (
	"strconv"

	"github.com/walcast/walcast/pluginkit/cdc"
)

// The sequin format: Sequin's CDC message (its documentation,
// docs/reference/messages.mdx), built from the envelope's parts:
//
//	{"record":…,"changes":…,"action":"insert|update|delete|read|truncate",
//	 "metadata":{"table_schema":…,"table_name":…,"idempotency_key":…,"commit_timestamp":…,
//	  "commit_lsn":…,"commit_idx":…,"database_name":…,"consumer":{…},"database":{…},
//	  "transaction_annotations":null}}
//
// Values are the envelope's (docs/events.md); key and old key too, so
// the scheduler orders the sink's rows as with the envelope.

// SequinOptions are the settings of the sequin format.
type SequinOptions struct {
	// Consumer names the sink: metadata.consumer's id and name.
	Consumer string
	// Database and Hostname are the source's: metadata.database_name
	// and metadata.database.
	Database, Hostname string
}

// envParts locates an envelope's parts for the formats built from it.
type envParts struct {
	env, key, oldKey, newRow, oldRow []byte
}

// appendSequin appends the Sequin message of a change.
func (d *Decoder) appendSequin(b []byte, o *SequinOptions, c *rowChange) []byte {
	p := &c.env
	b = append(b, `{"record":`...)
	switch c.op {
	case cdc.OpDelete:
		b = append(b, p.oldRow...)
	default:
		b = append(b, p.newRow...)
	}
	b = append(b, `,"changes":`...)
	if c.op == cdc.OpUpdate {
		b = appendChanges(b, p.oldRow, p.newRow)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"action":"`...)
	b = append(b, c.op...)
	b = append(b, `","metadata":{"table_schema":`...)
	b = appendJSONString(b, []byte(c.rel.schema))
	b = append(b, `,"table_name":`...)
	b = appendJSONString(b, []byte(c.rel.table))
	b = append(b, `,"idempotency_key":"`...)
	b = cdc.AppendLSN(b, d.commitLSN)
	b = append(b, ':')
	b = strconv.AppendUint(b, d.index, 10)
	b = append(b, `","commit_timestamp":"`...)
	b = d.commitTime.AppendFormat(b, "2006-01-02T15:04:05.000000Z07:00")
	b = append(b, `","commit_lsn":`...)
	b = strconv.AppendUint(b, d.commitLSN, 10)
	b = append(b, `,"commit_idx":`...)
	b = strconv.AppendUint(b, d.index, 10)
	b = append(b, `,"database_name":`...)
	b = appendJSONString(b, []byte(o.Database))
	b = append(b, `,"consumer":{"id":`...)
	b = appendJSONString(b, []byte(o.Consumer))
	b = append(b, `,"name":`...)
	b = appendJSONString(b, []byte(o.Consumer))
	b = append(b, `,"annotations":{}},"database":{"name":`...)
	b = appendJSONString(b, []byte(o.Database))
	b = append(b, `,"annotations":{},"database":`...)
	b = appendJSONString(b, []byte(o.Database))
	b = append(b, `,"hostname":`...)
	b = appendJSONString(b, []byte(o.Hostname))
	return append(b, `},"transaction_annotations":null}}`...)
}

// appendChanges appends the members of old whose value differs from the
// same member of new (Sequin's "changes": the previous values of the
// changed fields); {} when PostgreSQL sent no old row.
func appendChanges(b, old, new []byte) []byte {
	b = append(b, '{')
	if string(old) == "null" || len(old) == 0 {
		return append(b, '}')
	}
	first := true
	cdc.EachMember(old, func(name, value []byte) error {
		now, found := cdc.Member(new, string(name))
		if !found || string(now) == string(value) {
			return nil // unchanged, or a TOASTed value left out of new
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '"')
		b = append(b, name...) // raw, escapes as they are
		b = append(b, '"', ':')
		b = append(b, value...)
		return nil
	})
	return append(b, '}')
}
