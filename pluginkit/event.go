package pluginkit

import "github.com/walcast/walcast/pluginkit/cdc"

// The event model lives in pluginkit/cdc, which has no dependencies, so
// that library-mode programs do not link go-plugin and gRPC. These are the
// same types and functions under the names sinks have always used.

// EventID identifies one change: the LSN of its transaction's commit record
// and the change's 0-based position inside that transaction. See cdc.EventID.
type EventID = cdc.EventID

// Event is one change as a sink receives it. See cdc.Event.
type Event = cdc.Event

// Op is the kind of change an event describes.
type Op = cdc.Op

// The operations pgoutput reports.
const (
	OpInsert   = cdc.OpInsert
	OpUpdate   = cdc.OpUpdate
	OpDelete   = cdc.OpDelete
	OpTruncate = cdc.OpTruncate
	OpRead     = cdc.OpRead
	OpSchema   = cdc.OpSchema
	// OpResyncBegin and OpResyncEnd bracket a table's resync (see cdc).
	OpResyncBegin = cdc.OpResyncBegin
	OpResyncEnd   = cdc.OpResyncEnd
	// OpMessage is an application message through the WAL (see cdc).
	OpMessage = cdc.OpMessage
	// OpDetach is a partition detached from a captured table (see cdc).
	OpDetach = cdc.OpDetach
)

// ParseEventID parses the "<commit_lsn>:<index>" form, for example
// "0/1A2B3C8:0".
func ParseEventID(s string) (EventID, error) { return cdc.ParseEventID(s) }

// MustParseEventID is ParseEventID for ids known to be valid; it panics
// otherwise.
func MustParseEventID(s string) EventID { return cdc.MustParseEventID(s) }

// CompareEventIDs compares two ids in their string form by their order in
// the WAL: negative, zero or positive. An invalid id sorts before every
// valid one, and invalid ids compare equal.
func CompareEventIDs(a, b string) int { return cdc.CompareEventIDs(a, b) }

// FormatLSN prints an LSN the way PostgreSQL does: "%X/%X".
func FormatLSN(lsn uint64) string { return cdc.FormatLSN(lsn) }

// AppendLSN appends FormatLSN(lsn) to b.
func AppendLSN(b []byte, lsn uint64) []byte { return cdc.AppendLSN(b, lsn) }

// ParseLSN parses an LSN in PostgreSQL's "%X/%X" form.
func ParseLSN(s string) (uint64, error) { return cdc.ParseLSN(s) }
