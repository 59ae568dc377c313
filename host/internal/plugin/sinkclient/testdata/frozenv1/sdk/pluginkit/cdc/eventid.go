package cdc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// EventID identifies one change: the LSN of its transaction's commit record
// and the change's 0-based position inside that transaction. It is derived
// only from the WAL, so a redelivered event always carries the same id.
//
// Ids are totally ordered by commit LSN, then index. Their string form does
// not sort that way ("0/A:0" < "0/1A:0" as strings), so always compare
// parsed ids with Compare or CompareEventIDs.
type EventID struct {
	// CommitLSN is the LSN of the transaction's commit record.
	CommitLSN uint64
	// Index is the position of the change inside its transaction.
	Index uint64
}

// ParseEventID parses the "<commit_lsn>:<index>" form produced by String,
// for example "0/1A2B3C8:0". The LSN halves are hexadecimal (either case is
// accepted), the index decimal.
func ParseEventID(s string) (EventID, error) {
	lsnPart, idxPart, ok := strings.Cut(s, ":")
	if !ok {
		return EventID{}, fmt.Errorf("parse event id %q: want <commit_lsn>:<index>", s)
	}
	lsn, err := ParseLSN(lsnPart)
	if err != nil {
		return EventID{}, fmt.Errorf("parse event id %q: %w", s, err)
	}
	if idxPart == "" || (len(idxPart) > 1 && idxPart[0] == '0') || idxPart[0] == '+' || idxPart[0] == '-' {
		return EventID{}, fmt.Errorf("parse event id %q: index must be a decimal number without sign or leading zeros", s)
	}
	idx, err := strconv.ParseUint(idxPart, 10, 64)
	if err != nil {
		return EventID{}, fmt.Errorf("parse event id %q: index: %w", s, errors.Unwrap(err))
	}
	return EventID{CommitLSN: lsn, Index: idx}, nil
}

// MustParseEventID is ParseEventID for ids known to be valid (tests,
// constants). It panics on a malformed id.
func MustParseEventID(s string) EventID {
	id, err := ParseEventID(s)
	if err != nil {
		panic(err)
	}
	return id
}

// String formats the id the way PostgreSQL prints an LSN, followed by the
// index: "0/1A2B3C8:0".
func (id EventID) String() string {
	return FormatLSN(id.CommitLSN) + ":" + strconv.FormatUint(id.Index, 10)
}

// AppendText appends the String form to b without allocating.
func (id EventID) AppendText(b []byte) ([]byte, error) {
	b = AppendLSN(b, id.CommitLSN)
	b = append(b, ':')
	return strconv.AppendUint(b, id.Index, 10), nil
}

// MarshalText implements encoding.TextMarshaler.
func (id EventID) MarshalText() ([]byte, error) { return id.AppendText(nil) }

// UnmarshalText implements encoding.TextUnmarshaler.
func (id *EventID) UnmarshalText(b []byte) error {
	v, err := ParseEventID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// IsZero reports whether id is the zero id, which sorts before every event.
func (id EventID) IsZero() bool { return id == EventID{} }

// Compare returns a negative number when id sorts before o, zero when they
// are equal and a positive number when id sorts after o.
func (id EventID) Compare(o EventID) int {
	switch {
	case id.CommitLSN < o.CommitLSN:
		return -1
	case id.CommitLSN > o.CommitLSN:
		return 1
	case id.Index < o.Index:
		return -1
	case id.Index > o.Index:
		return 1
	}
	return 0
}

// Less reports whether id sorts before o.
func (id EventID) Less(o EventID) bool { return id.Compare(o) < 0 }

// CompareEventIDs compares two ids in their string form and returns -1, 0
// or +1. Like golang.org/x/mod/semver.Compare, an invalid id sorts before
// every valid one and two invalid ids compare equal, so the order stays
// total; use ParseEventID to have a malformed id reported as an error.
func CompareEventIDs(a, b string) int {
	ida, erra := ParseEventID(a)
	idb, errb := ParseEventID(b)
	switch {
	case erra != nil && errb != nil:
		return 0
	case erra != nil:
		return -1
	case errb != nil:
		return 1
	}
	return ida.Compare(idb)
}

// FormatLSN prints an LSN the way PostgreSQL does: "%X/%X", upper-case hex,
// no leading zeros.
func FormatLSN(lsn uint64) string { return string(AppendLSN(nil, lsn)) }

// AppendLSN appends FormatLSN(lsn) to b.
func AppendLSN(b []byte, lsn uint64) []byte {
	b = appendUpperHex(b, lsn>>32)
	b = append(b, '/')
	return appendUpperHex(b, lsn&0xFFFFFFFF)
}

func appendUpperHex(b []byte, v uint64) []byte {
	const digits = "0123456789ABCDEF"
	if v == 0 {
		return append(b, '0')
	}
	var tmp [16]byte
	i := len(tmp)
	for v > 0 {
		i--
		tmp[i] = digits[v&0xF]
		v >>= 4
	}
	return append(b, tmp[i:]...)
}

// ParseLSN parses an LSN in PostgreSQL's "%X/%X" form.
func ParseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("parse LSN %q: want <hex>/<hex>", s)
	}
	h, err := parseHex32(hi)
	if err != nil {
		return 0, fmt.Errorf("parse LSN %q: %w", s, err)
	}
	l, err := parseHex32(lo)
	if err != nil {
		return 0, fmt.Errorf("parse LSN %q: %w", s, err)
	}
	return h<<32 | l, nil
}

func parseHex32(s string) (uint64, error) {
	if s == "" || len(s) > 8 {
		return 0, errors.New("each half must be 1 to 8 hex digits")
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint64(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint64(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | uint64(c-'A'+10)
		default:
			return 0, fmt.Errorf("invalid hex digit %q", c)
		}
	}
	return v, nil
}
