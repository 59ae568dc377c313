package rules

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

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
// returns the new payload and the key inside it.
func (r *Rules) rewrite(payload []byte, computed []computedField) (out, key []byte, err error) {
	out = make([]byte, 0, len(payload)+64)
	out = append(out, '{')
	keyAt := [2]int{-1, -1}
	first := true
	err = cdc.EachMember(payload, func(name, value []byte) error {
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(append(append(out, '"'), name...), `":`...)
		switch string(name) {
		case "key":
			keyAt[0] = len(out)
			out = r.rewriteRow(out, value, rowKey, nil)
			keyAt[1] = len(out)
		case "new":
			out = r.rewriteRow(out, value, rowNew, computed)
		case "old":
			out = r.rewriteRow(out, value, rowOld, nil)
		case "unchanged":
			out = r.rewriteNames(out, value)
		default:
			out = append(out, value...)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read the envelope: %w", err)
	}
	out = append(out, '}')
	if keyAt[0] < 0 {
		return nil, nil, errors.New("the envelope has no key")
	}
	return out, out[keyAt[0]:keyAt[1]:keyAt[1]], nil
}

// rewriteRow appends the row raw (a JSON object or null) transformed.
func (r *Rules) rewriteRow(dst, raw []byte, mode rowMode, computed []computedField) []byte {
	if len(raw) == 0 || raw[0] != '{' {
		return append(dst, raw...) // null stays null
	}
	dst = append(dst, '{')
	n := 0
	_ = cdc.EachMember(raw, func(rawName, value []byte) error {
		rule := r.rule(rawName)
		if rule.drop || (mode != rowKey && r.keep != nil && !rule.keep) || shadowed(rawName, computed) {
			return nil
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		if rule.rename != "" {
			dst = appendJSONString(dst, rule.rename)
		} else {
			dst = append(append(append(dst, '"'), rawName...), '"')
		}
		dst = append(dst, ':')
		switch rule.mask {
		case MaskSHA256:
			dst = appendDigest(dst, value)
		case MaskRedact:
			if string(value) == "null" {
				dst = append(dst, value...)
			} else {
				dst = appendJSONString(dst, Redacted)
			}
		default:
			dst = append(dst, value...)
		}
		return nil
	})
	for _, c := range computed {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = appendJSONString(dst, c.name)
		dst = append(append(dst, ':'), c.value...)
	}
	return append(dst, '}')
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

// rule looks a column up by its raw JSON name: one map lookup and no
// allocation, unless the name is written with escapes.
func (r *Rules) rule(rawName []byte) columnRule {
	if bytes.IndexByte(rawName, '\\') >= 0 {
		return r.cols[jsonString(rawName)]
	}
	return r.cols[string(rawName)]
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
func (r *Rules) rewriteNames(dst, raw []byte) []byte {
	var names []string
	if err := json.Unmarshal(raw, &names); err != nil {
		return append(dst, raw...)
	}
	dst = append(dst, '[')
	n := 0
	for _, name := range names {
		if r.drop[name] || (r.keep != nil && !r.keep[name]) {
			continue
		}
		if to, ok := r.rename[name]; ok {
			name = to
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = appendJSONString(dst, name)
	}
	return append(dst, ']')
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
		text = []byte(jsonString(value[1 : len(value)-1]))
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
