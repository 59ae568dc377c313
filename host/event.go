package host

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Event is one committed change, as Stream.Next returns it.
//
// The row images are left as JSON (json.RawMessage) rather than decoded
// into maps: the caller unmarshals them into its own types, nothing is
// decoded that the caller does not read, and numeric values keep their
// exact text. Key, New, Old and the bytes returned by JSON share one
// buffer; treat them as read-only.
type Event struct {
	// ID is the event's deterministic id ("<commit_lsn>:<index>"). A
	// redelivered event carries the identical id, so it is what a
	// consumer dedupes on, and what Stream.Ack takes.
	ID cdc.EventID
	// XID is the id of the transaction that made the change.
	XID uint32
	// CommitTime is when that transaction committed (UTC).
	CommitTime time.Time
	// Schema and Table name the changed table; empty on a message event.
	Schema string
	Table  string
	// Op is insert, update, delete, truncate, read for a backfilled row,
	// or schema for a change of the table's shape (docs/events.md),
	// or resync_begin / resync_end around a resync's rows (Resync), or
	// message for an application message (Message).
	Op cdc.Op
	// Key holds the replica-identity columns as a JSON object; nil for a
	// truncate or a table without a key.
	Key json.RawMessage
	// New is the row after the change (insert, update); nil for a delete
	// or a truncate. Columns listed in Unchanged are left out of it.
	New json.RawMessage
	// Old is what the replica identity gives about the row before the
	// change (update, delete): the key columns by default, the whole row
	// with REPLICA IDENTITY FULL; nil when PostgreSQL sent nothing (an
	// update with the default identity that did not change the key).
	Old json.RawMessage
	// Unchanged names the TOASTed columns of New whose value the update
	// did not touch: PostgreSQL does not resend them, so they are absent
	// from New rather than reported as null.
	Unchanged []string
	// Cascade and RestartIdentity are the options of a truncate.
	Cascade         bool
	RestartIdentity bool
	// Resync is the resync's id on a resync_begin or resync_end event
	// (Stream.Resync, walcast resync); 0 otherwise.
	Resync int64
	// Message is the application message of a message event
	// (StreamConfig.MessagePrefixes); nil for every other op.
	Message *Message
	// Err is set when StreamConfig's filter or transform failed on this
	// event (a missing column, a division by zero): the event is as
	// captured, neither filtered nor transformed. Ack it like any other
	// once handled; it is not delivered again.
	Err error

	payload, key []byte
}

// JSON returns the event exactly as the daemon's sinks deliver it, in the
// stream's StreamConfig.Format (the envelope by default), so a library
// consumer can forward it unchanged. The slice is shared: do not modify it.
func (e *Event) JSON() []byte { return e.payload }

// JSONKey returns the event's key as the stream's format writes it, what
// a Kafka record of the event is keyed by: the envelope's key ("null" for
// none), or Debezium's key with Format "debezium". The slice is shared:
// do not modify it.
func (e *Event) JSONKey() []byte { return e.key }

// commitTimes remembers the last commit_time parsed: the events of a
// transaction share it, and parsing it for each event showed in the
// library's profile (docs/benchmarks.md, "Round 4").
type commitTimes struct {
	raw  string
	time time.Time
}

func (c *commitTimes) parse(value []byte) (time.Time, error) {
	if string(value) == c.raw && c.raw != "" {
		return c.time, nil
	}
	s, err := strconv.Unquote(string(value))
	if err != nil {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, err
	}
	c.raw, c.time = string(value), t
	return t, nil
}

// newEvent fills an Event from the host's encoded event (see
// commitTimes.newEvent).
func newEvent(pe cdc.Event) (Event, error) {
	var c commitTimes
	return c.newEvent(change.Event{Event: pe})
}

// newEvent fills an Event from the host's encoded event: from where the
// decoder says the parts are when it says so (change.Layout), else by
// scanning the envelope once, without reflection. Values are sub-slices
// of the payload either way.
func (c *commitTimes) newEvent(ce change.Event) (Event, error) {
	pe := ce.Event
	ev := Event{ID: pe.ID, Schema: pe.Schema, Table: pe.Table, Op: pe.Op, payload: pe.Payload, key: pe.Key, Err: ce.Err}
	if len(ce.Formats) > 0 {
		// The stream's format (StreamConfig.formats): what JSON returns;
		// the fields below still come from the envelope.
		ev.payload, ev.key = ce.Formats[0].Payload, ce.Formats[0].Key
	}
	if l := ce.Layout; l.Set {
		p := pe.Payload
		ev.XID, ev.CommitTime = l.XID, l.CommitTime
		ev.Key = nullToNil(pe.Key)
		ev.New = nullToNil(p[l.New[0]:l.New[1]])
		ev.Old = nullToNil(p[l.Old[0]:l.Old[1]])
		ev.Cascade, ev.RestartIdentity = l.Cascade, l.RestartIdentity
		if pe.Op == cdc.OpResyncBegin || pe.Op == cdc.OpResyncEnd {
			if err := resyncOf(&ev, p); err != nil {
				return Event{}, err
			}
		}
		if pe.Op == cdc.OpMessage {
			if err := messageOf(&ev, p); err != nil {
				return Event{}, err
			}
		}
		if l.Unchanged[1] > 0 {
			if err := json.Unmarshal(p[l.Unchanged[0]:l.Unchanged[1]], &ev.Unchanged); err != nil {
				return Event{}, fmt.Errorf("read envelope of event %s: unchanged: %w", pe.ID, err)
			}
		}
		return ev, nil
	}
	err := cdc.EachMember(pe.Payload, func(name, value []byte) error {
		switch string(name) {
		case "xid":
			x, err := strconv.ParseUint(string(value), 10, 32)
			if err != nil {
				return fmt.Errorf("xid: %w", err)
			}
			ev.XID = uint32(x)
		case "commit_time":
			t, err := c.parse(value)
			if err != nil {
				return fmt.Errorf("commit_time: %w", err)
			}
			ev.CommitTime = t
		case "key":
			ev.Key = nullToNil(value)
		case "new":
			ev.New = nullToNil(value)
		case "old":
			ev.Old = nullToNil(value)
		case "unchanged":
			if err := json.Unmarshal(value, &ev.Unchanged); err != nil {
				return fmt.Errorf("unchanged: %w", err)
			}
		case "cascade":
			ev.Cascade = string(value) == "true"
		case "restart_identity":
			ev.RestartIdentity = string(value) == "true"
		case "resync":
			id, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil {
				return fmt.Errorf("resync: %w", err)
			}
			ev.Resync = id
		}
		return nil
	})
	if err != nil {
		return Event{}, fmt.Errorf("read envelope of event %s: %w", pe.ID, err)
	}
	if pe.Op == cdc.OpMessage {
		if err := messageOf(&ev, pe.Payload); err != nil {
			return Event{}, err
		}
	}
	return ev, nil
}

// Message is an application's logical decoding message
// (pg_logical_emit_message) as a message event carries it.
type Message struct {
	// Prefix is the message's prefix, as the application passed it.
	Prefix string
	// Transactional is the message's transactional flag: a
	// transactional message is part of its transaction (the event's id
	// and XID are the transaction's, and it arrives only if that
	// commits); a non-transactional one arrives when PostgreSQL decodes
	// it, its XID and CommitTime zero.
	Transactional bool
	// Content is the message's content: the bytes the application wrote,
	// except that JSON content is compacted (the envelope embeds it as
	// JSON, without the whitespace between tokens; other content travels
	// as base64 and comes back byte for byte).
	Content []byte
}

// messageOf reads a message event's members from its envelope.
func messageOf(ev *Event, payload []byte) error {
	var m struct {
		Prefix        string          `json:"prefix"`
		Transactional bool            `json:"transactional"`
		Base64        bool            `json:"content_base64"`
		Content       json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(payload, &m); err != nil {
		return fmt.Errorf("read envelope of message event %s: %w", ev.ID, err)
	}
	msg := &Message{Prefix: m.Prefix, Transactional: m.Transactional, Content: m.Content}
	if m.Base64 {
		var b []byte
		if err := json.Unmarshal(m.Content, &b); err != nil {
			return fmt.Errorf("read envelope of message event %s: content: %w", ev.ID, err)
		}
		msg.Content = b
	}
	ev.Message = msg
	return nil
}

// resyncOf reads a marker's resync id from its envelope.
func resyncOf(ev *Event, payload []byte) error {
	v, ok := cdc.Member(payload, "resync")
	if !ok {
		return fmt.Errorf("read envelope of event %s: a %s without a resync id", ev.ID, ev.Op)
	}
	id, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return fmt.Errorf("read envelope of event %s: resync: %w", ev.ID, err)
	}
	ev.Resync = id
	return nil
}

func nullToNil(v []byte) json.RawMessage {
	if string(v) == "null" {
		return nil
	}
	return v[:len(v):len(v)]
}
