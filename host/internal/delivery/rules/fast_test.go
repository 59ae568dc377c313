package rules

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"

	"github.com/walcast/walcast/pluginkit/cdc"
)

// The fast path (fast.go) must give CEL's result whenever it gives one.
// These tests generate expressions of the kinds it compiles over rows of
// every value kind the envelope holds, evaluate each on both paths, and
// compare: the values where the fast path decided, and Apply's whole
// result (keep, route, error) with the fast path on and off.

// fastColumns are the generated rows' columns; a row may lack any.
// Two are written with escapes in the JSON, which only the decoded map
// finds: q"x, and n2 as "\u006e2".
var fastColumns = []string{"id", "n", "f", "s", "num", "b", "z", "obj", `q"x`, "n2"}

// genValue is one JSON value of the kinds the decoder writes, biased to
// the edges (escapes, large ints, numbers as strings).
func genValue(rnd *rand.Rand) string {
	switch rnd.IntN(14) {
	case 0:
		return "null"
	case 1:
		return strconv.FormatBool(rnd.IntN(2) == 0)
	case 2:
		return strconv.Itoa(rnd.IntN(21) - 10)
	case 3:
		return []string{"9223372036854775807", "-9223372036854775808", "9223372036854775808", "0", "-1"}[rnd.IntN(5)]
	case 4:
		return strconv.FormatFloat(rnd.NormFloat64()*100, 'g', -1, 64)
	case 5:
		return []string{"1.5", "-0.0", "1e3", "2.5E-3", "100.0", "3"}[rnd.IntN(6)]
	case 6:
		return strconv.Quote(strconv.FormatFloat(float64(rnd.IntN(40000))/100, 'f', 2, 64)) // numeric
	case 7:
		return []string{`"paid"`, `"new"`, `""`, `"DE"`, `"a\"b"`, `"caf\u00e9"`, `"x\\y"`, `"NaN"`, `"12"`, `"-7"`, `"1e400"`}[rnd.IntN(11)]
	case 8:
		return `{"a":1}`
	case 9:
		return `[1,"x"]`
	default:
		return []string{`"paid"`, "42", "100.5", `"100.5"`, "true"}[rnd.IntN(5)]
	}
}

func genRow(rnd *rand.Rand) string {
	if rnd.IntN(8) == 0 {
		return "null"
	}
	var parts []string
	for _, c := range fastColumns {
		if rnd.IntN(5) > 0 {
			name := strconv.Quote(c)
			if c == "n2" {
				name = `"\u006e2"`
			}
			parts = append(parts, name+":"+genValue(rnd))
		}
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func genEvent(t testing.TB, rnd *rand.Rand) cdc.Event {
	op := []string{"insert", "update", "delete", "read"}[rnd.IntN(4)]
	key := fmt.Sprintf(`{"id":%s}`, genValue(rnd))
	if rnd.IntN(6) == 0 {
		key = "null"
	}
	payload := fmt.Sprintf(`{"id":"0/A:%d","commit_lsn":"0/A","xid":%d,"commit_time":"2026-11-30T10:00:00Z","schema":"public","table":"%s","op":"%s","key":%s,"new":%s,"old":%s}`,
		rnd.IntN(100), rnd.IntN(1000), []string{"orders", "bench"}[rnd.IntN(2)], op, key, genRow(rnd), genRow(rnd))
	ev := event(t, payload)
	if rnd.IntN(3) == 0 {
		ev.Key = []byte(key) // a key of its own, not inside the payload
	}
	return ev
}

// genExpr is a random expression of the shapes the fast path compiles,
// and some it does not (it must then leave them to CEL).
func genExpr(rnd *rand.Rand, depth int) string {
	col := func() string {
		row := []string{"new", "old", "key"}[rnd.IntN(3)]
		c := fastColumns[rnd.IntN(len(fastColumns))]
		if rnd.IntN(4) == 0 || strings.Contains(c, `"`) {
			return fmt.Sprintf("%s[%q]", row, c)
		}
		return row + "." + c
	}
	if depth <= 0 || rnd.IntN(4) == 0 {
		switch rnd.IntN(9) {
		case 0:
			return col()
		case 1:
			return []string{"op", "schema", "table", "xid"}[rnd.IntN(4)]
		case 2:
			return []string{`"paid"`, `""`, `"insert"`, `"x\"y"`, `'DE'`}[rnd.IntN(5)]
		case 3:
			return []string{"0", "1", "-3", "100", "9223372036854775807"}[rnd.IntN(5)]
		case 4:
			return []string{"0.0", "1.5", "100.0", "-2.25"}[rnd.IntN(4)]
		case 5:
			return []string{"true", "false", "null"}[rnd.IntN(3)]
		case 6:
			return "has(" + col() + ")"
		case 7:
			return []string{`size(new)`, `"s" in changed`, `id`, `1u`, `new.obj.a`}[rnd.IntN(5)] // not on the fast path
		default:
			return col()
		}
	}
	a, b := genExpr(rnd, depth-1), genExpr(rnd, depth-1)
	switch rnd.IntN(12) {
	case 0, 1:
		return fmt.Sprintf("(%s %s %s)", a, []string{"==", "!="}[rnd.IntN(2)], b)
	case 2, 3:
		return fmt.Sprintf("(%s %s %s)", a, []string{"<", "<=", ">", ">="}[rnd.IntN(4)], b)
	case 4, 5:
		return fmt.Sprintf("(%s %s %s)", a, []string{"&&", "||"}[rnd.IntN(2)], b)
	case 6:
		return fmt.Sprintf("(%s %s %s)", a, []string{"+", "-", "*", "/", "%"}[rnd.IntN(5)], b)
	case 7:
		return fmt.Sprintf("%s(%s)", []string{"double", "int", "string"}[rnd.IntN(3)], a)
	case 8:
		return fmt.Sprintf("(%s ? %s : %s)", genExpr(rnd, depth-1), a, b)
	case 9:
		return fmt.Sprintf("%s(%s)", []string{"!", "-"}[rnd.IntN(2)], a)
	default:
		return fmt.Sprintf("(%s %s %s)", a, []string{"==", "&&", "<"}[rnd.IntN(3)], b)
	}
}

// sameValue compares a fast-path value with CEL's.
func sameValue(f fval, v ref.Val) bool {
	switch v := v.(type) {
	case types.Null:
		return f.k == fNull
	case types.Bool:
		return f.k == fBool && f.b == bool(v)
	case types.Int:
		return f.k == fInt && f.i == int64(v)
	case types.Double:
		return f.k == fDouble && (f.f == float64(v) && math.Signbit(f.f) == math.Signbit(float64(v)) || math.IsNaN(f.f) && math.IsNaN(float64(v)))
	case types.String:
		return f.k == fString && f.s == string(v)
	}
	return false
}

// checkFast evaluates text on ev both ways; it reports whether the
// expression compiled and whether the fast path decided.
func checkFast(t *testing.T, text string, ev cdc.Event) (compiled, decided bool) {
	t.Helper()
	env, err := newEnv()
	if err != nil {
		t.Fatal(err)
	}
	x, _, probs := compileOne(env, "test", text, nil)
	if len(probs) > 0 || x.fast == nil {
		return len(probs) == 0, false
	}
	c := fastCtx{ev: ev}
	got, ok := x.fast.eval(&c)
	want, _, err := x.prog.Eval(&vars{ev: ev})
	if !ok {
		return true, false
	}
	if err != nil || types.IsError(want) {
		t.Fatalf("%s on %s: the fast path gave %+v, CEL the error %v %v", text, ev.Payload, got, err, want)
	}
	if !sameValue(got, want) {
		t.Fatalf("%s on %s (key %s): the fast path gave %+v, CEL %v (%T)", text, ev.Payload, ev.Key, got, want, want)
	}
	return true, true
}

func TestFastPathAgreesWithCEL(t *testing.T) {
	rnd := rand.New(rand.NewPCG(28, 33))
	exprs, compiled, decided := 0, 0, 0
	for range 1200 {
		text := genExpr(rnd, 3)
		exprs++
		for range 20 {
			c, d := checkFast(t, text, genEvent(t, rnd))
			if !c {
				break
			}
			compiled++
			if d {
				decided++
			}
		}
	}
	t.Logf("%d expressions, %d evaluations compiled, %d decided on the fast path", exprs, compiled, decided)
	if decided < compiled/4 {
		t.Fatalf("the fast path decided only %d of %d evaluations: the generator no longer exercises it", decided, compiled)
	}
}

// Apply's result, filter and route alike, is the same with the fast
// path and without it (errors included, which the fast path leaves to
// CEL).
func TestApplyWithAndWithoutFastPath(t *testing.T) {
	rnd := rand.New(rand.NewPCG(6, 11))
	for range 600 {
		text := genExpr(rnd, 3)
		for _, s := range []Spec{{Filter: text}, {Route: text}, {Route: "string(" + text + ")"}} {
			r, probs := Compile(s)
			if len(probs) > 0 {
				continue
			}
			slow := *r
			slow.filter.fast, slow.route.fast = nil, nil
			for range 10 {
				ev := genEvent(t, rnd)
				got, gotErr := r.Apply(ev, nil)
				want, wantErr := slow.Apply(ev, nil)
				if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) || got.Keep != want.Keep || got.Event.Route != want.Event.Route {
					t.Fatalf("%+v on %s: fast %+v %v, CEL %+v %v", s, ev.Payload, got, gotErr, want, wantErr)
				}
			}
		}
	}
}

// A route read from a column is the route's own string, not a view of
// the payload (which the fast path reads without copying).
func TestFastRouteOwnsItsString(t *testing.T) {
	r := mustCompile(t, Spec{Route: `new.country`})
	ev := event(t, updateEnvelope)
	res, err := r.Apply(ev, nil)
	if err != nil || res.Event.Route != "DE" {
		t.Fatalf("route %q, %v", res.Event.Route, err)
	}
	copy(ev.Payload, strings.Repeat("x", len(ev.Payload)))
	if res.Event.Route != "DE" {
		t.Fatalf("the route changed with the payload: %q", res.Event.Route)
	}
}

// FuzzFastPath: any expression, any row.
func FuzzFastPath(f *testing.F) {
	f.Add(`new.status == "paid" && double(new.total) > 100.0`, `{"status":"paid","total":"120.50"}`)
	f.Add(`"bench-" + string(key.id % 8)`, `{"id":7}`)
	f.Add(`has(new.x) ? new.x + 1 : -1`, `{"x":9223372036854775807}`)
	f.Add(`new.a < new.b || !(new.c == null)`, `{"a":1.5,"b":1,"c":null}`)
	f.Fuzz(func(t *testing.T, text, row string) {
		payload := `{"id":"0/A:0","commit_lsn":"0/A","xid":1,"commit_time":"2026-11-30T10:00:00Z","schema":"public","table":"t","op":"update","key":` + row + `,"new":` + row + `,"old":null}`
		if !json.Valid([]byte(payload)) {
			return
		}
		checkFast(t, text, event(t, payload))
	})
}

// Every operator and conversion over every pair of a small set of values
// (equal ones, the int edges, -0.0, strings that parse as numbers),
// read from a row so that their types are known only when evaluated.
func TestFastPathOperatorGrid(t *testing.T) {
	values := []string{"null", "true", "false", "0", "1", "-1", "9223372036854775807", "-9223372036854775808",
		"0.0", "-0.0", "1.0", "1.5", "1e300", `""`, `"a"`, `"b"`, `"1"`, `"1.5"`, `"NaN"`, `"a\"b"`}
	binary := []string{"==", "!=", "<", "<=", ">", ">=", "&&", "||", "+", "-", "*", "/", "%"}
	unary := []string{"!new.x", "-new.x", "double(new.x)", "int(new.x)", "string(new.x)", "double(new.x) < double(new.y)", "has(new.x)", "new.x ? 1 : 2"}
	decided := 0
	for _, x := range values {
		for _, y := range values {
			ev := event(t, `{"id":"0/A:0","commit_lsn":"0/A","xid":1,"commit_time":"2026-11-30T10:00:00Z","schema":"public","table":"t","op":"update","key":{"id":1},"new":{"x":`+x+`,"y":`+y+`},"old":null}`)
			for _, op := range binary {
				if _, d := checkFast(t, "new.x "+op+" new.y", ev); d {
					decided++
				}
			}
			for _, u := range unary {
				if _, d := checkFast(t, u, ev); d {
					decided++
				}
			}
		}
	}
	t.Logf("%d evaluations decided on the fast path", decided)
}
