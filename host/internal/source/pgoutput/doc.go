// Package pgoutput parses the messages of PostgreSQL's pgoutput logical
// decoding plugin (protocol version 1), as they arrive in the WALData of
// each XLogData message of the replication stream. In: those bytes. Out:
// one message each (Begin, Relation, Insert, Update, Delete, Truncate,
// Commit, a logical decoding message, …), or an error.
//
// It only parses: what a message means for the stream (relation cache,
// transactions, event ids, the envelope) is package decode's. The messages
// are github.com/jackc/pglogrepl's types, so the rest of the host speaks
// one vocabulary.
//
// Two parsers answer the same for every input:
//
//   - Parse returns messages of their own (pglogrepl.Parse behind a framing
//     check);
//   - Parser.Parse decodes the row messages (Insert, Update, Delete) into
//     storage it reuses, with column values aliasing the input, so the
//     capture loop parses a change without allocating.
//
// Both first walk the message and refuse one whose lengths run past its
// end: pglogrepl.Parse trusts them, and a corrupt message would otherwise
// panic the host or make it allocate whatever a length field claims.
// FuzzParse holds the two to the same answers on arbitrary input.
package pgoutput
