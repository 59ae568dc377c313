package cdc

import (
	"bytes"
	"errors"
	"strings"
)

// ErrMalformed is returned by EachMember for input that is not a JSON
// object it can read.
var ErrMalformed = errors.New("malformed JSON object")

// EachMember calls fn with the raw name (between its quotes, escapes left
// as they are) and the raw value of every member of the JSON object obj,
// in order, without decoding anything. It checks only the structure it
// walks, which is all an envelope (encoded by walcast itself) needs; an
// error fn returns stops the walk and is returned as it is.
//
// It is how to read one part of an event's payload (new, old, unchanged)
// without decoding the whole envelope.
func EachMember(obj []byte, fn func(name, value []byte) error) error {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return ErrMalformed
	}
	i = skipSpace(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return nil
	}
	for {
		if i >= len(obj) || obj[i] != '"' {
			return ErrMalformed
		}
		end, ok := skipValue(obj, i)
		if !ok {
			return ErrMalformed
		}
		name := obj[i+1 : end-1]
		i = skipSpace(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return ErrMalformed
		}
		i = skipSpace(obj, i+1)
		if end, ok = skipValue(obj, i); !ok {
			return ErrMalformed
		}
		if err := fn(name, obj[i:end]); err != nil {
			return err
		}
		i = skipSpace(obj, end)
		switch {
		case i >= len(obj):
			return ErrMalformed
		case obj[i] == '}':
			return nil
		case obj[i] != ',':
			return ErrMalformed
		}
		i = skipSpace(obj, i+1)
	}
}

// errFound stops EachMember once Member has what it looks for.
var errFound = errors.New("found")

// Member returns the raw value of the member name of the JSON object obj
// (the first one, should the name repeat). found is false when obj has no
// such member or is not an object EachMember can read.
func Member(obj []byte, name string) (value []byte, found bool) {
	err := EachMember(obj, func(n, v []byte) error {
		if string(n) == name {
			value = v
			return errFound
		}
		return nil
	})
	return value, err == errFound
}

// skipValue returns the index just past the JSON value starting at b[i],
// false when there is none.
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		// Jump from quote to quote; a quote preceded by an odd number of
		// backslashes is escaped.
		for j := i + 1; ; {
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
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, ok := skipValue(b, j)
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
	default:
		// A number or a literal: runs to the next delimiter.
		j := i
		for j < len(b) && strings.IndexByte(",}] \t\r\n", b[j]) < 0 {
			j++
		}
		return j, j > i
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}
