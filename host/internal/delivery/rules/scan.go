package rules

import "bytes"

// shortString is how many bytes of a string skipJSON reads one by one
// before it searches for the closing quote.
const shortString = 16

// members walks the members of a JSON object as cdc.EachMember does
// (the same structure checks, whitespace allowed where JSON allows it),
// as an iterator that returns offsets instead of calling a function per
// member, and with a byte loop over strings: the names and most values
// of a row are a few bytes long, where the setup of a vectorised search
// costs more than the search. Apply walks the envelope and its rows with
// it on every event.
type members struct {
	b   []byte
	i   int
	bad bool // the object is malformed; next returned false
	n   int  // members returned so far
}

// newMembers starts a walk of obj; bad is set when obj is not an object.
func newMembers(obj []byte) members {
	m := members{b: obj}
	i := skipWS(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		m.bad = true
		m.i = len(obj)
		return m
	}
	m.i = i + 1
	return m
}

// next returns the next member's raw name (between its quotes) and raw
// value; ok is false at the end of the object and on malformed input
// (then bad is set).
func (m *members) next() (name, value []byte, ok bool) {
	b, i := m.b, skipWS(m.b, m.i)
	if m.bad || i >= len(b) {
		return m.fail()
	}
	if m.n == 0 {
		if b[i] == '}' {
			m.i = len(b)
			return nil, nil, false
		}
	} else {
		switch b[i] {
		case '}':
			m.i = len(b)
			return nil, nil, false
		case ',':
			i = skipWS(b, i+1)
		default:
			return m.fail()
		}
	}
	if i >= len(b) || b[i] != '"' {
		return m.fail()
	}
	end, ok := skipJSON(b, i)
	if !ok {
		return m.fail()
	}
	name = b[i+1 : end-1]
	i = skipWS(b, end)
	if i >= len(b) || b[i] != ':' {
		return m.fail()
	}
	i = skipWS(b, i+1)
	if end, ok = skipJSON(b, i); !ok {
		return m.fail()
	}
	m.i, m.n = end, m.n+1
	return name, b[i:end], true
}

func (m *members) fail() ([]byte, []byte, bool) {
	m.bad, m.i = true, len(m.b)
	return nil, nil, false
}

// member is cdc.Member on the iterator.
func member(obj []byte, name string) (value []byte, found bool) {
	m := newMembers(obj)
	for {
		n, v, ok := m.next()
		if !ok {
			return nil, false
		}
		if string(n) == name {
			return v, true
		}
	}
}

// skipJSON returns the index just past the JSON value at b[i].
func skipJSON(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		// A byte loop for the first bytes; a long string (a text column)
		// is searched from quote to quote, a quote after an odd number
		// of backslashes being escaped.
		j, short := i+1, min(len(b), i+1+shortString)
		for ; j < short; j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1, true
			}
		}
		for j < len(b) {
			k := bytes.IndexByte(b[j:], '"')
			if k < 0 {
				return 0, false
			}
			j += k
			n := 0
			for n < j-i-1 && b[j-1-n] == '\\' {
				n++
			}
			if n%2 == 0 {
				return j + 1, true
			}
			j++
		}
		return 0, false
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, ok := skipJSON(b, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	}
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return j, j > i
		}
		j++
	}
	return j, j > i
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}
