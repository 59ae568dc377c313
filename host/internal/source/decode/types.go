package decode

import (
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"
)

// kind is how a value's text form becomes JSON.
type kind uint8

const (
	// kindText is the default: the text form as a JSON string. numeric,
	// date/time types other than timestamps, uuid, network types, money,
	// enums, domains, ranges and everything unknown use it.
	kindText kind = iota
	// kindInt is an integer type; its text form is a JSON number.
	kindInt
	// kindFloat is float4/float8: a JSON number, except NaN and ±Infinity,
	// which JSON cannot represent and become strings.
	kindFloat
	// kindBool is 't' or 'f'.
	kindBool
	// kindJSON is json or jsonb, embedded as JSON.
	kindJSON
	// kindBytea is bytea in hex output form, emitted as standard base64.
	kindBytea
	// kindTimestamp is timestamp without time zone, emitted as RFC 3339
	// without an offset.
	kindTimestamp
	// kindTimestampTZ is timestamptz, emitted as RFC 3339 in UTC.
	kindTimestampTZ
)

// colType is a column's mapping: its kind, or for an array type the kind of
// its elements.
type colType struct {
	kind  kind
	array bool
}

// lookupType maps a type OID to its JSON mapping. Only builtin types are
// known; user-defined types (OID >= 16384: enums, domains, composites,
// extension types) are emitted as text, because their text form is the only
// representation the decoder can be sure of.
//
// The table is a switch rather than a map so that it is immutable by
// construction.
func lookupType(oid uint32) colType {
	switch oid {
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.OIDOID,
		pgtype.XIDOID, pgtype.CIDOID, pgtype.XID8OID:
		return colType{kind: kindInt}
	case pgtype.Float4OID, pgtype.Float8OID:
		return colType{kind: kindFloat}
	case pgtype.BoolOID:
		return colType{kind: kindBool}
	case pgtype.JSONOID, pgtype.JSONBOID:
		return colType{kind: kindJSON}
	case pgtype.ByteaOID:
		return colType{kind: kindBytea}
	case pgtype.TimestampOID:
		return colType{kind: kindTimestamp}
	case pgtype.TimestamptzOID:
		return colType{kind: kindTimestampTZ}

	case pgtype.Int2ArrayOID, pgtype.Int4ArrayOID, pgtype.Int8ArrayOID,
		pgtype.OIDArrayOID, pgtype.XIDArrayOID, pgtype.CIDArrayOID, pgtype.XID8ArrayOID:
		return colType{kind: kindInt, array: true}
	case pgtype.Float4ArrayOID, pgtype.Float8ArrayOID:
		return colType{kind: kindFloat, array: true}
	case pgtype.BoolArrayOID:
		return colType{kind: kindBool, array: true}
	case pgtype.JSONArrayOID, pgtype.JSONBArrayOID:
		return colType{kind: kindJSON, array: true}
	case pgtype.ByteaArrayOID:
		return colType{kind: kindBytea, array: true}
	case pgtype.TimestampArrayOID:
		return colType{kind: kindTimestamp, array: true}
	case pgtype.TimestamptzArrayOID:
		return colType{kind: kindTimestampTZ, array: true}
	case pgtype.TextArrayOID, pgtype.VarcharArrayOID, pgtype.BPCharArrayOID,
		pgtype.NameArrayOID, pgtype.QCharArrayOID, pgtype.NumericArrayOID,
		pgtype.UUIDArrayOID, pgtype.DateArrayOID, pgtype.TimeArrayOID,
		pgtype.TimetzArrayOID, pgtype.IntervalArrayOID, pgtype.InetArrayOID,
		pgtype.CIDRArrayOID, pgtype.MacaddrArrayOID, pgtype.XMLArrayOID,
		pgtype.BitArrayOID, pgtype.VarbitArrayOID, pgtype.JSONPathArrayOID,
		oidMacaddr8Array, oidMoneyArray:
		return colType{kind: kindText, array: true}
	}
	// Everything else, including arrays of unknown element types (box[]
	// uses ';' as its delimiter, ranges contain commas), is text.
	return colType{kind: kindText}
}

// OIDs pgtype does not name.
const (
	oidMacaddr8Array = 775
	oidMoneyArray    = 791
)

// appendValue appends the JSON form of one text-format value of kind k.
// It never fails: a value that does not have the shape its type promises is
// emitted as a JSON string of its text form.
func appendValue(b []byte, k kind, text []byte) []byte {
	switch k {
	case kindInt:
		if isJSONNumber(text) {
			return append(b, text...)
		}
	case kindFloat:
		// "NaN", "Infinity" and "-Infinity" fail the number grammar and
		// fall through to a string, as do exotic spellings.
		if isJSONNumber(text) {
			return append(b, text...)
		}
	case kindBool:
		if len(text) == 1 {
			switch text[0] {
			case 't':
				return append(b, "true"...)
			case 'f':
				return append(b, "false"...)
			}
		}
	case kindJSON:
		if utf8.Valid(text) && json.Valid(text) {
			return appendCompactJSON(b, text)
		}
	case kindBytea:
		if out, ok := appendByteaBase64(b, text); ok {
			return out
		}
	case kindTimestamp, kindTimestampTZ:
		if out, ok := appendTimestamp(b, text, k == kindTimestampTZ); ok {
			return out
		}
	}
	return appendJSONString(b, text)
}

// isJSONNumber reports whether s matches JSON's number grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func isJSONNumber(s []byte) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		i = skipDigits(s, i+1)
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		j := skipDigits(s, i+1)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := skipDigits(s, i)
		if j == i {
			return false
		}
		i = j
	}
	return i == len(s)
}

func skipDigits(s []byte, i int) int {
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// AppendJSONString appends s as a JSON string the way envelopes carry
// text: for the backfill runner, whose chunk payloads the decoder reads back.
func AppendJSONString(b, s []byte) []byte { return appendJSONString(b, s) }

// appendJSONString appends s as a JSON string. Control characters are
// escaped, invalid UTF-8 becomes U+FFFD, and U+2028/U+2029 are escaped so the
// envelope can be embedded in JavaScript (the sse sink serves browsers).
func appendJSONString(b, s []byte) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendCompactJSON appends valid JSON src without insignificant
// whitespace: jsonb's text form has a space after every ':' and ',', and a
// json value keeps whatever its author typed, newlines included, which
// would break line-oriented sinks.
func appendCompactJSON(b, src []byte) []byte {
	inString, escaped := false, false
	start := 0
	for i, c := range src {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			b = append(b, src[start:i]...)
			start = i + 1
		}
	}
	return append(b, src[start:]...)
}

// appendByteaBase64 converts bytea's hex output form ("\x0a0b…") to
// standard base64 without an intermediate buffer. It reports false for
// anything else (e.g. bytea_output = escape), leaving b unchanged in length.
func appendByteaBase64(b, text []byte) ([]byte, bool) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	if len(text) < 2 || text[0] != '\\' || text[1] != 'x' || len(text)%2 != 0 {
		return b, false
	}
	hexText := text[2:]
	mark := len(b)
	b = append(b, '"')
	var group [3]byte
	n := 0
	for i := 0; i < len(hexText); i += 2 {
		hi, ok1 := unhex(hexText[i])
		lo, ok2 := unhex(hexText[i+1])
		if !ok1 || !ok2 {
			return b[:mark], false
		}
		group[n] = hi<<4 | lo
		n++
		if n == 3 {
			v := uint(group[0])<<16 | uint(group[1])<<8 | uint(group[2])
			b = append(b, alphabet[v>>18&0x3F], alphabet[v>>12&0x3F], alphabet[v>>6&0x3F], alphabet[v&0x3F])
			n = 0
		}
	}
	switch n {
	case 1:
		v := uint(group[0]) << 16
		b = append(b, alphabet[v>>18&0x3F], alphabet[v>>12&0x3F], '=', '=')
	case 2:
		v := uint(group[0])<<16 | uint(group[1])<<8
		b = append(b, alphabet[v>>18&0x3F], alphabet[v>>12&0x3F], alphabet[v>>6&0x3F], '=')
	}
	return append(b, '"'), true
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// appendTimestamp converts PostgreSQL's ISO output of a timestamp
// ("2026-11-30 10:00:00.123456", plus "+00" for timestamptz) to RFC 3339
// with exactly six fractional digits and, for timestamptz, in UTC ("Z").
// With the session in UTC the offset is always +00 and the conversion is a
// copy; any other offset is applied. It reports false for values RFC 3339
// cannot express (infinity, BC dates, years beyond 9999) and for text that
// is not in the ISO form, leaving b unchanged in length.
func appendTimestamp(b, text []byte, tz bool) ([]byte, bool) {
	// "YYYY-MM-DD HH:MM:SS" is 19 bytes.
	if len(text) < 19 || text[4] != '-' || text[7] != '-' || text[10] != ' ' || text[13] != ':' || text[16] != ':' {
		return b, false
	}
	for _, i := range [...]int{0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18} {
		if text[i] < '0' || text[i] > '9' {
			return b, false
		}
	}
	rest := text[19:]
	var frac [6]byte
	for i := range frac {
		frac[i] = '0'
	}
	if len(rest) > 0 && rest[0] == '.' {
		n := skipDigits(rest, 1) - 1
		if n == 0 || n > 6 {
			return b, false
		}
		copy(frac[:], rest[1:1+n])
		rest = rest[1+n:]
	}
	var offset int // seconds east of UTC
	if tz {
		var ok bool
		if offset, ok = parseOffset(rest); !ok {
			return b, false
		}
	} else if len(rest) != 0 {
		return b, false
	}
	if offset == 0 {
		b = append(b, '"')
		b = append(b, text[:10]...)
		b = append(b, 'T')
		b = append(b, text[11:19]...)
		b = append(b, '.')
		b = append(b, frac[:]...)
		if tz {
			b = append(b, 'Z')
		}
		return append(b, '"'), true
	}
	// Not UTC: do the calendar arithmetic with the time package.
	num := func(s []byte) int {
		v := 0
		for _, c := range s {
			v = v*10 + int(c-'0')
		}
		return v
	}
	t := time.Date(num(text[0:4]), time.Month(num(text[5:7])), num(text[8:10]),
		num(text[11:13]), num(text[14:16]), num(text[17:19]), num(frac[:])*1000, time.UTC)
	t = t.Add(-time.Duration(offset) * time.Second)
	if t.Year() < 0 || t.Year() > 9999 {
		return b, false
	}
	b = append(b, '"')
	b = t.AppendFormat(b, "2006-01-02T15:04:05.000000Z07:00")
	return append(b, '"'), true
}

// parseOffset parses a timestamptz offset as PostgreSQL prints it:
// "+HH", "+HH:MM" or "+HH:MM:SS" (and the same with '-').
func parseOffset(s []byte) (int, bool) {
	if len(s) != 3 && len(s) != 6 && len(s) != 9 {
		return 0, false
	}
	sign := 1
	switch s[0] {
	case '+':
	case '-':
		sign = -1
	default:
		return 0, false
	}
	secs := 0
	for i, mult := 1, 3600; i < len(s); i, mult = i+3, mult/60 {
		if i > 1 && s[i-1] != ':' {
			return 0, false
		}
		hi, lo := s[i], s[i+1]
		if hi < '0' || hi > '9' || lo < '0' || lo > '9' {
			return 0, false
		}
		secs += int(hi-'0')*10*mult + int(lo-'0')*mult
	}
	return sign * secs, true
}
