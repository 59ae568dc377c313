package cdc

// Op is the kind of change an event describes.
type Op string

// The operations pgoutput reports.
const (
	OpInsert   Op = "insert"
	OpUpdate   Op = "update"
	OpDelete   Op = "delete"
	OpTruncate Op = "truncate"
	// OpRead is a row as it stood when a backfill read it: key and new
	// are set, old is null.
	OpRead Op = "read"
	// OpResyncBegin and OpResyncEnd bracket the read events of one table
	// re-read by a resync (walcast resync): key, new and old are null,
	// "resync" holds the resync's id. A consumer that keeps a copy removes,
	// at the end marker, every row of the table it has not seen since the
	// begin marker (docs/guarantees.md, "Resync").
	OpResyncBegin Op = "resync_begin"
	OpResyncEnd   Op = "resync_end"
	// OpSchema says a table's shape changed (columns added, dropped,
	// retyped or renamed, key or replica identity changed, the table
	// renamed): "columns" holds the shape after, "before" the shape
	// before, "changes" what changed. It comes before the first change
	// in the new shape and is a barrier for its table, like a truncate.
	OpSchema Op = "schema"
	// OpMessage is an application's logical decoding message
	// (pg_logical_emit_message) whose prefix the source's messages block
	// selects: Schema and Table are empty, Key is {"prefix":…} (messages
	// of one prefix are one ordering lane), the envelope's "prefix",
	// "transactional", "lsn" and "content" carry the message. A
	// transactional message is a change of its transaction; a
	// non-transactional one has a commit of its own (docs/events.md).
	// It is not TableWide: it concerns no table.
	OpMessage Op = "message"
	// OpDetach says a partition was DETACHed from a captured partitioned
	// table and its rows left the table without a delete each (source
	// on_detach = "event"): key, new and old are null, "partition" names
	// the partition ("schema.table"), "rows" is how many rows it held. It
	// is a barrier for its table, like a truncate.
	OpDetach Op = "detach"
)

// TableWide reports whether an event of op concerns its whole table
// rather than one row (a truncate, a schema event, a resync marker, a
// partition's detach):
// such an event is
// ordered after every earlier event of its table and before every later
// one.
func (o Op) TableWide() bool {
	return o == OpTruncate || o == OpSchema || o == OpResyncBegin || o == OpResyncEnd || o == OpDetach
}

// Event is one change as a sink receives it: the envelope, already encoded
// once by the host (the same bytes go to every sink), plus the fields a sink
// routes on so that it never has to parse the envelope.
type Event struct {
	// ID is the event's deterministic id; see EventID.
	ID EventID
	// Schema and Table name the changed relation; both are empty on a
	// message event.
	Schema string
	Table  string
	// Op is insert, update, delete, truncate, read, schema, resync_begin,
	// resync_end, message or detach.
	Op Op
	// Key is the JSON object of the row's replica-identity columns, or
	// "null" for a truncate, a schema event, a detach or a table without
	// a key.
	Key []byte
	// Payload is the JSON envelope (docs/events.md).
	Payload []byte
	// Route is the name of the destination the sink's route expression
	// chose for this event (a topic, a path, a channel …), "" when the
	// sink has no route: the sink then uses its configured destination.
	// Events of one row may change route when the expression reads a
	// column that changed (docs/filters.md, "Routes and order").
	Route string
	// Headers are named strings the event carries besides its payload,
	// for a sink that has headers (Kafka record headers, HTTP headers):
	// an outbox event's "id" and "type" (docs/outbox.md). Nil for a
	// change event, whose payload is the envelope.
	Headers map[string]string
}

// Member returns the raw JSON of one top-level member of the envelope
// ("new", "old", "unchanged", …) without decoding the rest; found is false
// when the envelope has no such member.
func (e *Event) Member(name string) (value []byte, found bool) {
	return Member(e.Payload, name)
}
