package rules

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"

	"github.com/walcast/walcast/pluginkit/cdc"
)

// row is a JSON object of the envelope (key, new, old) as a CEL map that
// looks a member up in the raw bytes when an expression selects it
// (new.status, new["status"], has(new.status)): a filter that reads two
// columns scans the row twice and decodes two values, instead of decoding
// the whole row into a map first. Anything else an expression does with
// the whole map (size, iteration, equality) decodes it once.
type row struct {
	raw  []byte // a JSON object; nil for a null row
	full traits.Mapper
}

var _ traits.Mapper = (*row)(nil)

func newRow(raw []byte) *row {
	if bytes.Equal(raw, []byte("null")) {
		raw = nil
	}
	return &row{raw: raw}
}

// lookup finds name in the raw object. A name written with escapes in the
// JSON (a column named with a quote or a backslash) is found by the
// decoded map instead.
func (r *row) lookup(key ref.Val) (ref.Val, bool) {
	name, ok := key.(types.String)
	if !ok || r.raw == nil {
		return r.decoded().Find(key)
	}
	if v, found := cdc.Member(r.raw, string(name)); found {
		return jsonValue(v), true
	}
	if bytes.IndexByte(r.raw, '\\') >= 0 {
		return r.decoded().Find(key)
	}
	return nil, false
}

func (r *row) decoded() traits.Mapper {
	if r.full == nil {
		m := map[ref.Val]ref.Val{}
		if r.raw != nil {
			_ = cdc.EachMember(r.raw, func(name, value []byte) error {
				m[types.String(jsonString(name))] = jsonValue(value)
				return nil
			})
		}
		r.full = types.NewRefValMap(types.DefaultTypeAdapter, m)
	}
	return r.full
}

func (r *row) Find(key ref.Val) (ref.Val, bool) { return r.lookup(key) }

func (r *row) Get(key ref.Val) ref.Val {
	if v, ok := r.lookup(key); ok {
		return v
	}
	return r.decoded().Get(key) // the missing-key error, as CEL words it
}

func (r *row) Contains(key ref.Val) ref.Val {
	_, ok := r.lookup(key)
	return types.Bool(ok)
}

func (r *row) ConvertToNative(t reflect.Type) (any, error) { return r.decoded().ConvertToNative(t) }
func (r *row) ConvertToType(t ref.Type) ref.Val            { return r.decoded().ConvertToType(t) }
func (r *row) Equal(other ref.Val) ref.Val                 { return r.decoded().Equal(other) }
func (r *row) Type() ref.Type                              { return types.MapType }
func (r *row) Value() any                                  { return r.decoded().Value() }
func (r *row) Iterator() traits.Iterator                   { return r.decoded().Iterator() }
func (r *row) Size() ref.Val                               { return r.decoded().Size() }

// jsonValue turns one JSON value of walcast's envelope into a CEL value:
// strings, booleans and null as such, a number without fraction or
// exponent as an int (a double when it does not fit), any other number as
// a double, objects and arrays as maps and lists. numeric columns are
// JSON strings in the envelope (no precision lost): compare them with
// double(new.total) > 100.0.
func jsonValue(v []byte) ref.Val {
	if len(v) == 0 {
		return types.NullValue
	}
	switch v[0] {
	case '"':
		return types.String(jsonString(v[1 : len(v)-1]))
	case 't':
		return types.True
	case 'f':
		return types.False
	case 'n':
		return types.NullValue
	case '{':
		return newRow(v).decoded()
	case '[':
		var elems []json.RawMessage
		if err := json.Unmarshal(v, &elems); err != nil {
			return types.NewErr("malformed JSON array in the event: %v", err)
		}
		vals := make([]ref.Val, len(elems))
		for i, e := range elems {
			vals[i] = jsonValue(e)
		}
		return types.NewRefValList(types.DefaultTypeAdapter, vals)
	}
	if bytes.IndexAny(v, ".eE") < 0 {
		if n, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return types.Int(n)
		}
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return types.NewErr("malformed JSON number %q in the event", v)
	}
	return types.Double(f)
}

// jsonString decodes the inside of a JSON string (between its quotes).
func jsonString(inner []byte) string {
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner)
	}
	quoted := make([]byte, 0, len(inner)+2)
	quoted = append(append(append(quoted, '"'), inner...), '"')
	var s string
	if err := json.Unmarshal(quoted, &s); err != nil {
		return string(inner)
	}
	return s
}
