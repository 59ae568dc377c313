package rules

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"

	"github.com/walcast/walcast/pluginkit/cdc"
)

// rowMode says which of the envelope's objects a row is.
type rowMode uint8

const (
	rowKey rowMode = iota // key (and the old key): keep does not apply
	rowNew                // new: computed columns are added
	rowOld
)

type computedField struct {
	name  string
	value []byte // JSON
}

// rewrite writes the envelope again with key, new, old and unchanged
// transformed, every other member as it was, in the same order. It
// returns the new payload and the key inside it: payload and its key
// themselves when the transform changed nothing in this event (none of
// its columns is named by the transform, nothing computed).
//
// It writes into a pooled scratch buffer and copies the result into one
// allocation of its exact size: the payload stays in flight until the
// sink acknowledges it, the scratch goes back to the pool at once.
//
// key is the event's key: when it lies in payload (the decoder's events)
// the walk starts there, past the head (id, lsn, xid, time, schema,
// table, op), which has no row in it.
func (r *Rules) rewrite(payload, key []byte, computed []computedField) (out, _ []byte, err error) {
	buf := scratch.Get().(*[]byte)
	defer scratch.Put(buf)
	w := rewriter{r: r, out: (*buf)[:0], payload: payload, keyAt: [2]int{-1, -1}, touched: len(computed) > 0}
	m := newMembers(payload)
	if at := keyInPayload(key, payload); at > 0 {
		m.i, m.n = at-len(`,"key":`), 1 // at the comma before "key"
	}
	for {
		name, value, ok := m.next()
		if !ok {
			break
		}
		switch string(name) {
		case "key", "new", "old", "unchanged":
			w.member(name, value, computed)
		}
	}
	if m.bad {
		return nil, nil, fmt.Errorf("read the envelope: %w", cdc.ErrMalformed)
	}
	if w.keyAt[0] < 0 {
		return nil, nil, errors.New("the envelope has no key")
	}
	if !w.touched {
		k := payload[w.keyIn[0]:w.keyIn[1]:w.keyIn[1]]
		return payload, k, nil
	}
	w.out = append(w.out, payload[w.copied:]...)
	out = append([]byte(nil), w.out...) // no zeroing first, as make would
	if cap(w.out) <= maxScratch {
		*buf = w.out
	}
	return out, out[w.keyAt[0]:w.keyAt[1]:w.keyAt[1]], nil
}

// scratch holds the buffers rewrite writes into; one larger than
// maxScratch (a huge row) is not kept.
var scratch = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const maxScratch = 64 << 10

// rewriter is one rewrite under way: out holds the payload up to copied
// (an offset in payload) with the rows before it transformed. The
// members between rows are copied in one piece when the next row is.
type rewriter struct {
	r       *Rules
	out     []byte
	payload []byte
	copied  int
	keyAt   [2]int // the key in out
	keyIn   [2]int // the key in payload
	touched bool   // out differs from payload
}

// member appends the envelope up to value, then value transformed.
func (w *rewriter) member(name, value []byte, computed []computedField) {
	at := offset(w.payload, value)
	w.out = append(w.out, w.payload[w.copied:at]...)
	w.copied = at + len(value)
	var changed bool
	switch string(name) {
	case "key":
		w.keyIn = [2]int{at, at + len(value)}
		w.keyAt[0] = len(w.out)
		w.out, changed = w.r.rewriteRow(w.out, value, rowKey, nil)
		w.keyAt[1] = len(w.out)
	case "new":
		w.out, changed = w.r.rewriteRow(w.out, value, rowNew, computed)
	case "old":
		w.out, changed = w.r.rewriteRow(w.out, value, rowOld, nil)
	case "unchanged":
		w.out, changed = w.r.rewriteNames(w.out, value)
	}
	w.touched = w.touched || changed
}

// offset is where sub, a slice of b, starts in b.
func offset(b, sub []byte) int { return cap(b) - cap(sub) }

// rewriteRow appends the row raw (a JSON object or null) transformed;
// changed is false when that is raw itself.
func (r *Rules) rewriteRow(dst, raw []byte, mode rowMode, computed []computedField) (_ []byte, changed bool) {
	if len(raw) == 0 || raw[0] != '{' {
		return append(dst, raw...), false // null stays null
	}
	dst = append(dst, '{')
	n := 0
	m := newMembers(raw)
	for {
		rawName, value, ok := m.next()
		if !ok {
			break
		}
		rule := r.rule(rawName)
		if rule.drop || (mode != rowKey && r.keep != nil && !rule.keep) || shadowed(rawName, computed) {
			changed = true
			continue
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		if rule.rename != "" {
			changed = true
			dst = appendJSONString(dst, rule.rename)
		} else {
			dst = append(append(append(dst, '"'), rawName...), '"')
		}
		dst = append(dst, ':')
		switch rule.mask {
		case MaskSHA256:
			changed = true
			dst = appendDigest(dst, value)
		case MaskRedact:
			changed = true
			if string(value) == "null" {
				dst = append(dst, value...)
			} else {
				dst = appendJSONString(dst, Redacted)
			}
		default:
			dst = append(dst, value...)
		}
	}
	for _, c := range computed {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		changed = true
		dst = appendJSONString(dst, c.name)
		dst = append(append(dst, ':'), c.value...)
	}
	return append(dst, '}'), changed
}

// shadowed: a computed column replaces a captured one of its name.
func shadowed(rawName []byte, computed []computedField) bool {
	for _, c := range computed {
		if c.name == string(rawName) {
			return true
		}
	}
	return false
}

// columnRule is what the transform does to one column.
type columnRule struct {
	drop, keep   bool
	mask, rename string
}

// rule looks a column up by its raw JSON name without allocating,
// unless the name is written with escapes: by comparing it with each
// name the transform has when it has few (cheaper than hashing it),
// else in the map. A raw name equal to one of those is that column: the
// list holds only names JSON writes without escapes (linearRules).
func (r *Rules) rule(rawName []byte) columnRule {
	if r.colNames != nil {
		for i, name := range r.colNames {
			if string(rawName) == name {
				return r.colRules[i]
			}
		}
		if bytes.IndexByte(rawName, '\\') < 0 {
			return columnRule{}
		}
	}
	if bytes.IndexByte(rawName, '\\') >= 0 {
		return r.cols[jsonString(rawName)]
	}
	return r.cols[string(rawName)]
}

// maxLinearRules is how many columns a transform may name for rule to
// compare names rather than look them up in the map.
const maxLinearRules = 8

// linearRules lists the map's columns for rule, nil when there are too
// many.
func linearRules(m map[string]columnRule) (names []string, rules []columnRule) {
	if len(m) == 0 || len(m) > maxLinearRules {
		return nil, nil
	}
	for _, name := range slices.Sorted(maps.Keys(m)) {
		if q := appendJSONString(nil, name); string(q[1:len(q)-1]) != name {
			return nil, nil // written with escapes: the map decodes names
		}
		names, rules = append(names, name), append(rules, m[name])
	}
	return names, rules
}

// columnRules merges drop, keep, mask and rename into one map.
func (r *Rules) columnRules() map[string]columnRule {
	m := map[string]columnRule{}
	edit := func(name string, f func(c *columnRule)) {
		c := m[name]
		f(&c)
		m[name] = c
	}
	for name := range r.drop {
		edit(name, func(c *columnRule) { c.drop = true })
	}
	for name := range r.keep {
		edit(name, func(c *columnRule) { c.keep = true })
	}
	for name, kind := range r.mask {
		edit(name, func(c *columnRule) { c.mask = kind })
	}
	for name, to := range r.rename {
		edit(name, func(c *columnRule) { c.rename = to })
	}
	return m
}

// rewriteNames appends the unchanged list without dropped (or not kept)
// columns and with renamed ones under their new name.
func (r *Rules) rewriteNames(dst, raw []byte) (_ []byte, changed bool) {
	if string(raw) == "[]" || string(raw) == "null" {
		return append(dst, raw...), false
	}
	var names []string
	if err := json.Unmarshal(raw, &names); err != nil {
		return append(dst, raw...), false
	}
	dst = append(dst, '[')
	n := 0
	for _, name := range names {
		if r.drop[name] || (r.keep != nil && !r.keep[name]) {
			changed = true
			continue
		}
		if to, ok := r.rename[name]; ok {
			changed = true
			name = to
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = appendJSONString(dst, name)
	}
	return append(dst, ']'), changed
}

// appendDigest appends the hex SHA-256 of a value's text: a string's
// characters, any other value's JSON. null stays null (there is nothing
// to hide).
func appendDigest(dst, value []byte) []byte {
	if string(value) == "null" {
		return append(dst, value...)
	}
	text := value
	if len(value) >= 2 && value[0] == '"' {
		text = value[1 : len(value)-1]
		if bytes.IndexByte(text, '\\') >= 0 {
			text = []byte(jsonString(text))
		}
	}
	sum := sha256.Sum256(text)
	dst = append(dst, '"')
	dst = hex.AppendEncode(dst, sum[:])
	return append(dst, '"')
}

func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= 0x80 {
			b, _ := json.Marshal(s) // a string always marshals
			return append(dst, b...)
		}
	}
	return append(append(append(dst, '"'), s...), '"')
}

// toJSON encodes a computed value the way the envelope encodes columns.
func toJSON(v ref.Val) ([]byte, error) {
	native, err := toNative(v)
	if err != nil {
		return nil, err
	}
	return json.Marshal(native)
}

func toNative(v ref.Val) (any, error) {
	switch v := v.(type) {
	case types.String, types.Bool, types.Int, types.Uint, types.Double:
		return v.Value(), nil
	case types.Null:
		return nil, nil
	case types.Bytes:
		return base64.StdEncoding.EncodeToString(v), nil
	case types.Timestamp:
		return v.UTC().Format("2006-01-02T15:04:05.000000Z07:00"), nil
	case types.Duration:
		return v.Duration.String(), nil
	case traits.Mapper:
		m := map[string]any{}
		for it := v.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			val, err := toNative(v.Get(k))
			if err != nil {
				return nil, err
			}
			m[fmt.Sprint(k.Value())] = val
		}
		return m, nil
	case traits.Lister:
		var out []any
		for it := v.Iterator(); it.HasNext() == types.True; {
			val, err := toNative(it.Next())
			if err != nil {
				return nil, err
			}
			out = append(out, val)
		}
		return out, nil
	}
	return nil, fmt.Errorf("a value of type %s cannot be written into the event", v.Type().TypeName())
}
