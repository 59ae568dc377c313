package rules

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"unsafe"

	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"

	"github.com/walcast/walcast/pluginkit/cdc"
)

// The fast path: most filters and routes are comparisons, boolean logic,
// arithmetic and string concatenation over a few columns and the event's
// op, schema and table. For those, CEL's general evaluation (an
// activation, a boxed ref.Val per value, a map per row) costs more than
// the work itself. compileFast turns such an expression's checked AST
// into a small tree evaluated on plain values read straight from the
// envelope, without allocating.
//
// It is only ever a shortcut: an expression it does not know is not
// compiled (nil), and an evaluation it cannot finish with CEL's exact
// result (any error, a value other than null, bool, int, double or
// string, a NaN) says so (ok false) and the caller evaluates the
// expression with CEL instead. So an error, and its message, always
// comes from CEL, and what the fast path returns is what CEL returns:
// TestFastPathAgreesWithCEL checks it over generated rows.

type fkind uint8

const (
	fNull fkind = iota
	fBool
	fInt
	fDouble
	fString
)

// fval is one value of the fast path. s may point into the event's
// payload (see colValue): it must not outlive the Apply that read it.
type fval struct {
	k fkind
	b bool
	i int64
	f float64
	s string
}

type nodeOp uint8

const (
	nLit nodeOp = iota
	nOp
	nSchema
	nTable
	nXid
	nCol // row.name
	nHas // has(row.name)
	nEq
	nNe
	nLt
	nLe
	nGt
	nGe
	nAnd
	nOr
	nNot
	nCond
	nAdd
	nSub
	nMul
	nDiv
	nMod
	nNeg
	nToDouble
	nToInt
	nToString
)

// fastRow names one of the envelope's rows.
type fastRow uint8

const (
	fKey fastRow = iota
	fNew
	fOld
)

var rowNames = [...]string{fKey: "key", fNew: "new", fOld: "old"}

type node struct {
	op   nodeOp
	args []*node
	lit  fval    // nLit
	row  fastRow // nCol, nHas
	name string  // nCol, nHas: the column
}

// compileFast compiles e for the fast path, nil when it uses anything
// the fast path does not evaluate.
func compileFast(e ast.Expr) *node {
	switch e.Kind() {
	case ast.LiteralKind:
		switch v := e.AsLiteral().(type) {
		case types.String:
			return &node{op: nLit, lit: fval{k: fString, s: string(v)}}
		case types.Int:
			return &node{op: nLit, lit: fval{k: fInt, i: int64(v)}}
		case types.Double:
			return &node{op: nLit, lit: fval{k: fDouble, f: float64(v)}}
		case types.Bool:
			return &node{op: nLit, lit: fval{k: fBool, b: bool(v)}}
		case types.Null:
			return &node{op: nLit}
		}
		return nil
	case ast.IdentKind:
		switch e.AsIdent() {
		case "op":
			return &node{op: nOp}
		case "schema":
			return &node{op: nSchema}
		case "table":
			return &node{op: nTable}
		case "xid":
			return &node{op: nXid}
		}
		return nil // key, new, old as a whole, changed, id, commit_time
	case ast.SelectKind:
		sel := e.AsSelect()
		row, ok := fastRowOf(sel.Operand())
		if !ok {
			return nil
		}
		op := nCol
		if sel.IsTestOnly() {
			op = nHas
		}
		return &node{op: op, row: row, name: sel.FieldName()}
	case ast.CallKind:
		return compileCall(e.AsCall())
	}
	return nil
}

var callOps = map[string]nodeOp{
	operators.Equals: nEq, operators.NotEquals: nNe,
	operators.Less: nLt, operators.LessEquals: nLe, operators.Greater: nGt, operators.GreaterEquals: nGe,
	operators.LogicalAnd: nAnd, operators.LogicalOr: nOr, operators.LogicalNot: nNot,
	operators.Conditional: nCond,
	operators.Add:         nAdd, operators.Subtract: nSub, operators.Multiply: nMul, operators.Divide: nDiv,
	operators.Modulo: nMod, operators.Negate: nNeg,
	"double": nToDouble, "int": nToInt, "string": nToString,
}

func compileCall(call ast.CallExpr) *node {
	if call.IsMemberFunction() {
		return nil
	}
	args := call.Args()
	if call.FunctionName() == operators.Index && len(args) == 2 {
		row, ok := fastRowOf(args[0])
		name, isConst := constString(args[1])
		if !ok || !isConst {
			return nil
		}
		return &node{op: nCol, row: row, name: name}
	}
	op, ok := callOps[call.FunctionName()]
	if !ok {
		return nil
	}
	want := 2
	switch op {
	case nNot, nNeg, nToDouble, nToInt, nToString:
		want = 1
	case nCond:
		want = 3
	case nAnd, nOr:
		want = len(args)
	}
	if len(args) != want || len(args) == 0 {
		return nil
	}
	n := &node{op: op, args: make([]*node, len(args))}
	for i, a := range args {
		if n.args[i] = compileFast(a); n.args[i] == nil {
			return nil
		}
	}
	return n
}

func fastRowOf(e ast.Expr) (fastRow, bool) {
	switch rowVar(e) {
	case "key":
		return fKey, true
	case "new":
		return fNew, true
	case "old":
		return fOld, true
	}
	return 0, false
}

// fastCtx is what the fast path reads of one event; rows are found in
// the payload when first read. It lives on Apply's stack, with a copy of
// the event: a pointer to Apply's would move that to the heap.
type fastCtx struct {
	ev     cdc.Event
	rows   [3][]byte // a JSON object, nil for a null or absent row
	loaded [3]bool
	vars   *vars // CEL's activation, once an expression needed CEL
}

func (c *fastCtx) row(r fastRow) []byte {
	if !c.loaded[r] {
		c.loaded[r] = true
		var raw []byte
		switch r {
		case fKey:
			raw = c.ev.Key
		case fNew:
			raw = newAfterKey(&c.ev)
		}
		if raw == nil {
			raw, _ = member(c.ev.Payload, rowNames[r])
		}
		if len(raw) > 0 && raw[0] == '{' {
			c.rows[r] = raw
		}
	}
	return c.rows[r]
}

// newAfterKey finds the new row without walking the envelope's head:
// the decoder writes "new" right after "key" and Key is the key's bytes
// inside the payload (decode.go). What it returns starts with the row
// and runs on to the payload's end, which member ignores. nil when
// the event is not laid out so (a key of its own, another order).
func newAfterKey(ev *cdc.Event) []byte {
	const next = `,"new":{`
	at := keyInPayload(ev.Key, ev.Payload)
	if at < 0 {
		return nil
	}
	end := at + len(ev.Key)
	if !bytes.HasPrefix(ev.Payload[end:], []byte(next)) {
		return nil
	}
	return ev.Payload[end+len(next)-1:]
}

// keyInPayload is where key lies in payload as the envelope's top-level
// "key" member (the decoder's Key is that slice of its payload): the
// offset of its value, -1 when it is not so (a key of its own).
func keyInPayload(key, payload []byte) int {
	const member = `"key":`
	if len(key) == 0 || len(payload) == 0 {
		return -1
	}
	kp, pp := uintptr(unsafe.Pointer(unsafe.SliceData(key))), uintptr(unsafe.Pointer(unsafe.SliceData(payload)))
	if kp < pp+uintptr(len(member))+1 || kp+uintptr(len(key)) > pp+uintptr(len(payload)) {
		return -1
	}
	at := int(kp - pp)
	// Preceded by ,"key": the top-level member after the head (a nested
	// "key" would sit inside a row, after the top-level one).
	if string(payload[at-len(member)-1:at]) != ","+member {
		return -1
	}
	return at
}

// column finds name in a row as row.lookup does. found is false when
// the row has no such column; ok is false when only CEL can tell (a name
// written with escapes in the JSON).
func (c *fastCtx) column(r fastRow, name string) (raw []byte, found, ok bool) {
	obj := c.row(r)
	if obj == nil {
		return nil, false, true
	}
	if v, found := member(obj, name); found {
		return v, true, true
	}
	return nil, false, bytes.IndexByte(obj, '\\') < 0
}

// eval evaluates n on the event of c; ok false: ask CEL.
func (n *node) eval(c *fastCtx) (fval, bool) {
	switch n.op {
	case nLit:
		return n.lit, true
	case nOp:
		return fval{k: fString, s: string(c.ev.Op)}, true
	case nSchema:
		return fval{k: fString, s: c.ev.Schema}, true
	case nTable:
		return fval{k: fString, s: c.ev.Table}, true
	case nXid:
		x, _ := member(c.ev.Payload, "xid")
		return colValue(x)
	case nCol:
		raw, found, ok := c.column(n.row, n.name)
		if !found || !ok {
			return fval{}, false // a missing column is CEL's error
		}
		return colValue(raw)
	case nHas:
		_, found, ok := c.column(n.row, n.name)
		return fval{k: fBool, b: found}, ok
	case nAnd, nOr:
		// CEL's && and || are commutative over errors: a false (a true)
		// decides whatever the other side gives, an error decides
		// against a true (a false).
		decides := n.op == nOr
		undecided := false
		for _, a := range n.args {
			v, ok := a.eval(c)
			if !ok || v.k != fBool {
				undecided = true
				continue
			}
			if v.b == decides {
				return v, true
			}
		}
		return fval{k: fBool, b: !decides}, !undecided
	case nNot:
		v, ok := n.args[0].eval(c)
		if !ok || v.k != fBool {
			return fval{}, false
		}
		return fval{k: fBool, b: !v.b}, true
	case nCond:
		v, ok := n.args[0].eval(c)
		if !ok || v.k != fBool {
			return fval{}, false
		}
		if v.b {
			return n.args[1].eval(c)
		}
		return n.args[2].eval(c)
	case nNeg:
		v, ok := n.args[0].eval(c)
		switch {
		case !ok:
		case v.k == fInt && v.i != math.MinInt64:
			return fval{k: fInt, i: -v.i}, true
		case v.k == fDouble:
			return fval{k: fDouble, f: -v.f}, true
		}
		return fval{}, false
	case nToDouble, nToInt, nToString:
		v, ok := n.args[0].eval(c)
		if !ok {
			return fval{}, false
		}
		return convert(n.op, v)
	}
	a, ok := n.args[0].eval(c)
	if !ok {
		return fval{}, false
	}
	b, ok := n.args[1].eval(c)
	if !ok {
		return fval{}, false
	}
	switch n.op {
	case nEq, nNe:
		eq, ok := equal(a, b)
		return fval{k: fBool, b: eq == (n.op == nEq)}, ok
	case nLt, nLe, nGt, nGe:
		cmp, ok := compare(a, b)
		if !ok {
			return fval{}, false
		}
		var r bool
		switch n.op {
		case nLt:
			r = cmp < 0
		case nLe:
			r = cmp <= 0
		case nGt:
			r = cmp > 0
		default:
			r = cmp >= 0
		}
		return fval{k: fBool, b: r}, true
	}
	return arith(n.op, a, b)
}

// colValue is jsonValue for the kinds the fast path knows. A string
// without escapes points into the payload instead of being copied.
func colValue(v []byte) (fval, bool) {
	if len(v) == 0 {
		return fval{}, true
	}
	switch v[0] {
	case '"':
		inner := v[1 : len(v)-1]
		if bytes.IndexByte(inner, '\\') >= 0 {
			return fval{k: fString, s: jsonString(inner)}, true
		}
		return fval{k: fString, s: unsafe.String(unsafe.SliceData(inner), len(inner))}, true
	case 't':
		return fval{k: fBool, b: true}, true
	case 'f':
		return fval{k: fBool, b: false}, true
	case 'n':
		return fval{}, true
	case '{', '[':
		return fval{}, false
	}
	s := unsafe.String(unsafe.SliceData(v), len(v))
	if bytes.IndexAny(v, ".eE") < 0 {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return fval{k: fInt, i: n}, true
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) {
		return fval{}, false
	}
	return fval{k: fDouble, f: f}, true
}

func numeric(v fval) bool { return v.k == fInt || v.k == fDouble }

// equal is CEL's heterogeneous equality: numbers by value across int and
// double, other kinds equal only to their own kind.
func equal(a, b fval) (eq, ok bool) {
	if numeric(a) && numeric(b) {
		c, ok := compare(a, b)
		return c == 0, ok
	}
	if a.k != b.k {
		return false, true
	}
	switch a.k {
	case fNull:
		return true, true
	case fBool:
		return a.b == b.b, true
	case fString:
		return a.s == b.s, true
	}
	return false, false
}

// compare orders two values as CEL does with cross-type numeric
// comparisons; ok is false where CEL gives an error (no overload, NaN).
func compare(a, b fval) (int, bool) {
	switch {
	case a.k == fInt && b.k == fInt:
		return cmp3(a.i < b.i, a.i > b.i), true
	case numeric(a) && numeric(b):
		if a.k == fDouble && math.IsNaN(a.f) || b.k == fDouble && math.IsNaN(b.f) {
			return 0, false
		}
		if a.k == fInt {
			return -compareDoubleInt(b.f, a.i), true
		}
		if b.k == fInt {
			return compareDoubleInt(a.f, b.i), true
		}
		return cmp3(a.f < b.f, a.f > b.f), true
	case a.k != b.k:
		return 0, false
	case a.k == fString:
		return cmp3(a.s < b.s, a.s > b.s), true
	case a.k == fBool:
		return cmp3(!a.b && b.b, a.b && !b.b), true
	}
	return 0, false
}

// compareDoubleInt is cel-go's (common/types/compare.go).
func compareDoubleInt(d float64, i int64) int {
	if d < math.MinInt64 {
		return -1
	}
	if d > math.MaxInt64 {
		return 1
	}
	f := float64(i)
	return cmp3(d < f, d > f)
}

func cmp3(less, greater bool) int {
	switch {
	case less:
		return -1
	case greater:
		return 1
	}
	return 0
}

// arith is +, -, *, / and % on two ints (overflow and division by zero
// are CEL's errors), two doubles, and + on two strings.
func arith(op nodeOp, a, b fval) (fval, bool) {
	switch {
	case a.k == fInt && b.k == fInt:
		x, y := a.i, b.i
		var r int64
		switch op {
		case nAdd:
			r = x + y
			if (y > 0 && r < x) || (y < 0 && r > x) {
				return fval{}, false
			}
		case nSub:
			r = x - y
			if (y > 0 && r > x) || (y < 0 && r < x) {
				return fval{}, false
			}
		case nMul:
			if x != 0 && y != 0 {
				r = x * y
				if (x == -1 && y == math.MinInt64) || (y == -1 && x == math.MinInt64) || r/y != x {
					return fval{}, false
				}
			}
		case nDiv, nMod:
			if y == 0 || (x == math.MinInt64 && y == -1) {
				return fval{}, false
			}
			if op == nDiv {
				r = x / y
			} else {
				r = x % y
			}
		}
		return fval{k: fInt, i: r}, true
	case a.k == fDouble && b.k == fDouble:
		switch op {
		case nAdd:
			return fval{k: fDouble, f: a.f + b.f}, true
		case nSub:
			return fval{k: fDouble, f: a.f - b.f}, true
		case nMul:
			return fval{k: fDouble, f: a.f * b.f}, true
		case nDiv:
			return fval{k: fDouble, f: a.f / b.f}, true
		}
	case a.k == fString && b.k == fString && op == nAdd:
		return fval{k: fString, s: a.s + b.s}, true
	}
	return fval{}, false
}

// convert is double(), int() and string() as cel-go converts (its
// common/types ConvertToType), for the kinds the fast path knows.
func convert(op nodeOp, v fval) (fval, bool) {
	switch op {
	case nToDouble:
		switch v.k {
		case fDouble:
			return v, true
		case fInt:
			return fval{k: fDouble, f: float64(v.i)}, true
		case fString:
			if f, err := strconv.ParseFloat(v.s, 64); err == nil {
				return fval{k: fDouble, f: f}, true
			}
		}
	case nToInt:
		switch v.k {
		case fInt:
			return v, true
		case fString:
			if i, err := strconv.ParseInt(v.s, 10, 64); err == nil {
				return fval{k: fInt, i: i}, true
			}
		}
	case nToString:
		switch v.k {
		case fString:
			return v, true
		case fInt:
			return fval{k: fString, s: strconv.FormatInt(v.i, 10)}, true
		case fBool:
			return fval{k: fString, s: strconv.FormatBool(v.b)}, true
		case fDouble:
			return fval{k: fString, s: fmt.Sprintf("%g", v.f)}, true
		}
	}
	return fval{}, false
}
