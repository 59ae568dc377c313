// Package decode turns pgoutput messages (protocol version 1, parsed by
// package pgoutput into github.com/jackc/pglogrepl's types) into
// change.Events (a cdc.Event plus host-only routing facts) carrying the
// JSON envelope (docs/architecture.md, "Envelope"): it keeps the relation
// cache and the open transaction, and writes the envelope.
//
// The capture loop owns the replication connection and hands every message
// of the stream to one Decoder, in order:
//
//	d := decode.New(decode.Options{PrimaryKey: lookup})
//	var p pgoutput.Parser // reuses its row messages: one message at a time
//	msg, err := p.Parse(xld.WALData)
//	...
//	err = d.Decode(msg, func(ev change.Event) error { return queue(ev) })
//	...
//	d.Reset() // after every reconnect
//
// # State
//
// A Decoder holds two pieces of state.
//
// The relation cache maps a relation id to the columns PostgreSQL described in
// its last Relation message. pgoutput sends a Relation message before the
// first change of a relation in a session and again whenever the relation's
// definition changes, so every Relation message overwrites the entry, and
// Reset drops the whole cache when the session ends: relation ids and the
// "already sent" bookkeeping on the server side do not survive a reconnect.
// A change for a relation the cache does not know is an error, never a guess.
//
// The transaction state is opened by Begin and closed by Commit:
//
//	idle ──Begin──▶ in transaction ──Insert/Update/Delete/Truncate (emit 0..n)──▶ … ──Commit──▶ idle
//
// Begin fixes the commit LSN (BeginMessage.FinalLSN, the LSN of the commit
// record with protocol version 1), the xid and the commit time, and resets the
// index to 0. Each emitted event gets id CommitLSN:Index and increments the
// index; nothing else does. Changes to relations in the "walcast" schema (the
// control plane, which a FOR ALL TABLES publication would include) are
// dropped without consuming an index, so ids depend only on the user's
// changes. A change outside a transaction is an error.
//
// After Commit, CommitLSN and Emitted keep describing the finished
// transaction until the next Begin, so the capture loop can still ask how many
// events it produced.
//
// # Encoding
//
// The envelope is appended to a reusable buffer with hand-written JSON
// encoding (no reflection); the only allocation per event is the copy that
// the emitted Event owns. Event.Key is a capacity-limited sub-slice of that
// same copy, so Key and Payload share memory and must be treated as
// immutable, as the rest of the host already does (the same bytes go to every
// sink).
//
// Values arrive in pgoutput's text format. The capture connection must set
// TimeZone=UTC and DateStyle=ISO; values that do not have the expected shape
// are emitted as their text form in a JSON string rather than rejected, so an
// unexpected setting degrades the type mapping but never loses data. See
// types.go for the mapping.
//
// # Backfill chunks
//
// A transactional logical decoding message with BackfillPrefix is a chunk
// of rows a backfill read (package backfill writes them): the Decoder
// turns its rows into read events of the chunk's table, for the sinks the
// chunk names, with ids in the stream like any other change's. Chunks of
// another pipeline (Options.Pipeline) are skipped.
//
// # Schema events
//
// A Relation message is compared with the last shape known of its
// relation before that point of the stream (shape.go); when they differ,
// a schema event is emitted there, taking the next index. The history of
// shapes (Options.Shapes) outlives Reset and restarts, because pgoutput
// sends a Relation message at the start of every session whether or not
// the relation changed: deciding from the session's cache would make the
// event, and the ids after it, depend on where a session began. Two
// logical decoding messages also become schema events: DDLPrefix (the
// ddl_events trigger, ddl.go) and VanishedPrefix (a listed table dropped
// or renamed, vanished.go).
//
// A Decoder is not safe for concurrent use; the capture loop is its only
// caller.
package decode
