package decode

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pglogrepl"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/host/internal/pg"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// messageWanted reports whether a logical decoding message is an
// application message the pipeline asked for.
func (d *Decoder) messageWanted(prefix string) bool {
	if strings.HasPrefix(prefix, pg.MessagePrefix) {
		return false
	}
	for _, p := range d.opts.MessagePrefixes {
		if strings.HasPrefix(prefix, p) {
			return true
		}
	}
	return false
}

// message turns an application's logical decoding message into a message
// event:
//
//	{"id":…,"commit_lsn":…,"xid":…,"commit_time":…,"schema":null,"table":null,
//	 "op":"message","key":{"prefix":"app.orders"},"new":null,"old":null,
//	 "prefix":"app.orders","transactional":true,"lsn":"0/1529DB8",
//	 "content_base64":false,"content":{"order":42}}
//
// A transactional message is a change of its transaction: it takes the
// next index, like a row. A non-transactional one is sent by PostgreSQL
// when it is decoded, outside any transaction of the stream, so it has no
// commit of its own: its id is nonTxID(lsn):0, and commit_lsn, xid and
// commit_time are null. Its key, the prefix, is its ordering lane.
func (d *Decoder) message(m *pglogrepl.LogicalDecodingMessage, emit func(change.Event) error) error {
	if m.Transactional != d.inTx {
		if m.Transactional {
			return fmt.Errorf("decode message %q at %s: transactional, but no transaction is open", m.Prefix, m.LSN)
		}
		return fmt.Errorf("decode message %q at %s: non-transactional, but inside a transaction of the stream", m.Prefix, m.LSN)
	}
	if !m.Transactional {
		// Outside a transaction of the stream (checked above): the
		// event's id and head are the message's own, and the next Begin
		// sets them afresh.
		d.commitLSN, d.index = NonTransactionalLSN(uint64(m.LSN)), 0
		d.txHead = append(d.txHead[:0], `"commit_lsn":null,"xid":null,"commit_time":null,`...)
		d.xid, d.commitTime = 0, time.Time{}
	}
	rel := &relation{head: []byte(`"schema":null,"table":null,`)}
	b := d.appendHead(d.buf[:0], rel, cdc.OpMessage)
	b = append(b, `"key":{"prefix":`...)
	keyStart := len(b) - len(`{"prefix":`)
	b = appendJSONString(b, []byte(m.Prefix))
	b = append(b, '}')
	keyEnd := len(b)
	var lay change.Layout
	b = appendNoRows(b, &lay)
	b = append(b, `,"prefix":`...)
	b = appendJSONString(b, []byte(m.Prefix))
	b = append(b, `,"transactional":`...)
	b = appendBool(b, m.Transactional)
	b = append(b, `,"lsn":"`...)
	b = cdc.AppendLSN(b, uint64(m.LSN))
	b = append(b, '"')
	d.buf = appendMessageContent(b, m.Content)
	// No format has a shape for an application message: every sink gets
	// walcast's envelope for it (docs/formats.md).
	return d.emit(rel, cdc.OpMessage, keyStart, keyEnd, nil, lay, nil, emit)
}

// NonTransactionalLSN is the LSN in the id of a non-transactional message
// that PostgreSQL reports at lsn. PostgreSQL reports a message at the end
// of its WAL record, which is where the next record starts: often the
// commit record of the transaction that emitted it, whose events' ids
// start with that very LSN. One byte earlier is inside the message's own
// record, where no commit record can start, so the id is unique, sorts
// after every transaction committed before the message and before every
// one committed after it (the order the stream delivers them in), and is
// the same every time the slot sends the message again.
func NonTransactionalLSN(lsn uint64) uint64 { return lsn - 1 }

// appendMessageContent appends the content members of a message event and
// closes the envelope: the content as JSON when it is a JSON document in
// UTF-8 (compacted, so the envelope stays one line), else as base64 with
// content_base64 set.
func appendMessageContent(b, content []byte) []byte {
	if len(content) > 0 && utf8.Valid(content) && json.Valid(content) {
		start := len(b)
		b = append(b, `,"content_base64":false,"content":`...)
		buf := bytes.NewBuffer(b)
		if err := json.Compact(buf, content); err == nil {
			return append(buf.Bytes(), '}')
		}
		b = buf.Bytes()[:start] // json.Valid said yes: not reached
	}
	b = append(b, `,"content_base64":true,"content":"`...)
	b = base64.StdEncoding.AppendEncode(b, content)
	return append(b, `"}`...)
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, "true"...)
	}
	return append(b, "false"...)
}
