package rules

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"
)

// Spec is what a sink's block says: filter, route and transform, as
// written. The zero Spec does nothing.
type Spec struct {
	// Filter is a CEL expression of type bool: the sink receives the
	// events for which it is true.
	Filter string
	// Route is a CEL expression of type string: the name of the
	// destination (topic, path, channel …) the event goes to.
	Route     string
	Transform Transform
}

// Transform says what a sink receives of each row. The steps apply in
// this order: drop or keep, mask, rename, then set.
type Transform struct {
	// Drop removes columns from key, new, old and unchanged.
	Drop []string
	// Keep, when not empty, removes every other column from new, old and
	// unchanged (the key keeps its columns: it names the row).
	Keep []string
	// Mask replaces a column's value with a digest ("sha256": the hex
	// SHA-256 of its text) or a fixed string ("redact": "***").
	Mask map[string]string
	// Rename maps a column's name to the name the sink receives.
	Rename map[string]string
	// Set adds a column to new (when the event has a new row) computed by
	// a CEL expression over the event as captured.
	Set map[string]string
}

// Empty reports whether s asks for nothing.
func (s Spec) Empty() bool {
	t := s.Transform
	return s.Filter == "" && s.Route == "" && len(t.Drop) == 0 && len(t.Keep) == 0 &&
		len(t.Mask) == 0 && len(t.Rename) == 0 && len(t.Set) == 0
}

// The mask kinds.
const (
	MaskSHA256 = "sha256"
	MaskRedact = "redact"
)

// Redacted is what a column masked with "redact" holds.
const Redacted = "***"

// Problem is one error in a Spec. Where names the expression ("filter",
// "route", "set.region") or the setting ("mask.email"); Line (from 1) and
// Column (from 0, in characters) are inside the expression, both 0 when
// the problem is not at a place in one.
type Problem struct {
	Where        string
	Line, Column int
	Message      string
}

func (p Problem) Error() string {
	if p.Line > 0 {
		return fmt.Sprintf("%s, line %d column %d of the expression: %s", p.Where, p.Line, p.Column+1, p.Message)
	}
	return p.Where + ": " + p.Message
}

// Column is one column an expression names: new.total, old["status"],
// "email" in changed. Var is key, new, old or changed.
type Column struct {
	Where        string
	Var, Name    string
	Line, Column int
}

// Rules is a compiled Spec; safe for concurrent use.
type Rules struct {
	spec   Spec
	filter expr
	route  expr
	set    []setField
	drop   map[string]bool
	keep   map[string]bool
	mask   map[string]string
	rename map[string]string
	// cols is drop, keep, mask and rename by column (transform.go);
	// colNames and colRules the same as two lists when they are short.
	cols     map[string]columnRule
	colNames []string
	colRules []columnRule
	columns  []Column
	// needsChanged: some expression reads changed (computed per event
	// only then).
	needsChanged bool
}

type setField struct {
	name string
	prog cel.Program
}

// expr is one compiled expression: the CEL program, and the same
// expression for the fast path (fast.go) when it has one.
type expr struct {
	prog cel.Program
	fast *node
}

// newEnv declares the variables every expression sees. key, new and old
// are maps (empty when the event has no such row), changed a list of
// column names.
func newEnv() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("op", cel.StringType),
		cel.Variable("schema", cel.StringType),
		cel.Variable("table", cel.StringType),
		cel.Variable("id", cel.StringType),
		cel.Variable("xid", cel.IntType),
		cel.Variable("commit_time", cel.TimestampType),
		cel.Variable("key", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("new", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("old", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("changed", cel.ListType(cel.StringType)),
		cel.CrossTypeNumericComparisons(true),
	)
}

// Compile type-checks and compiles every expression of s and checks its
// transform. It returns every problem it finds, not the first.
func Compile(s Spec) (*Rules, []Problem) {
	env, err := newEnv()
	if err != nil {
		return nil, []Problem{{Where: "rules", Message: err.Error()}}
	}
	r := &Rules{spec: s, drop: set(s.Transform.Drop), keep: set(s.Transform.Keep),
		mask: s.Transform.Mask, rename: s.Transform.Rename}
	var probs []Problem
	compile := func(where, text string, want *cel.Type) expr {
		x, cols, ps := compileOne(env, where, text, want)
		probs = append(probs, ps...)
		r.columns = append(r.columns, cols...)
		return x
	}
	if s.Filter != "" {
		r.filter = compile("filter", s.Filter, cel.BoolType)
	}
	if s.Route != "" {
		r.route = compile("route", s.Route, cel.StringType)
	}
	for _, name := range slices.Sorted(maps.Keys(s.Transform.Set)) {
		where := "set." + name
		if name == "" {
			probs = append(probs, Problem{Where: "set", Message: "a computed column needs a name"})
			continue
		}
		r.set = append(r.set, setField{name: name, prog: compile(where, s.Transform.Set[name], nil).prog})
	}
	probs = append(probs, r.checkTransform()...)
	r.cols = r.columnRules()
	r.colNames, r.colRules = linearRules(r.cols)
	for _, c := range r.columns {
		if c.Var == "changed" {
			r.needsChanged = true
		}
	}
	if len(probs) > 0 {
		return nil, probs
	}
	return r, nil
}

// compileOne compiles one expression; want is its required type (nil:
// any).
func compileOne(env *cel.Env, where, text string, want *cel.Type) (expr, []Column, []Problem) {
	checked, iss := env.Compile(text)
	if iss != nil && iss.Err() != nil {
		var probs []Problem
		for _, e := range iss.Errors() {
			probs = append(probs, Problem{Where: where, Line: e.Location.Line(), Column: e.Location.Column(), Message: e.Message})
		}
		return expr{}, nil, probs
	}
	if out := checked.OutputType(); want != nil && !out.IsExactType(want) && !out.IsExactType(cel.DynType) {
		return expr{}, nil, []Problem{{Where: where, Line: 1, Column: 0,
			Message: fmt.Sprintf("the expression is of type %s; %s needs %s", out, where, want)}}
	}
	prog, err := env.Program(checked, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return expr{}, nil, []Problem{{Where: where, Message: err.Error()}}
	}
	return expr{prog: prog, fast: compileFast(checked.NativeRep().Expr())}, columnsOf(checked, where), nil
}

// columnsOf lists the columns an expression names by a constant:
// new.x, new["x"], has(new.x), "x" in changed.
func columnsOf(checked *cel.Ast, where string) []Column {
	native := checked.NativeRep()
	info := native.SourceInfo()
	var cols []Column
	add := func(e ast.Expr, v, name string) {
		loc := info.GetStartLocation(e.ID())
		cols = append(cols, Column{Where: where, Var: v, Name: name, Line: loc.Line(), Column: loc.Column()})
	}
	ast.PreOrderVisit(native.Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		switch e.Kind() {
		case ast.SelectKind:
			sel := e.AsSelect()
			if v := rowVar(sel.Operand()); v != "" {
				add(e, v, sel.FieldName())
			}
		case ast.CallKind:
			call := e.AsCall()
			args := call.Args()
			if len(args) != 2 {
				return
			}
			switch call.FunctionName() {
			case operators.Index, operators.OptIndex:
				if v := rowVar(args[0]); v != "" {
					if name, ok := constString(args[1]); ok {
						add(args[1], v, name)
					}
				}
			case operators.In:
				if args[1].Kind() == ast.IdentKind && args[1].AsIdent() == "changed" {
					if name, ok := constString(args[0]); ok {
						add(args[0], "changed", name)
					}
				}
			}
		}
	}))
	return cols
}

// rowVar is "key", "new" or "old" when e is that variable, else "".
func rowVar(e ast.Expr) string {
	if e.Kind() != ast.IdentKind {
		return ""
	}
	switch name := e.AsIdent(); name {
	case "key", "new", "old":
		return name
	}
	return ""
}

func constString(e ast.Expr) (string, bool) {
	if e.Kind() != ast.LiteralKind {
		return "", false
	}
	s, ok := e.AsLiteral().(types.String)
	return string(s), ok
}

// checkTransform finds what contradicts itself in a transform.
func (r *Rules) checkTransform() []Problem {
	t := r.spec.Transform
	var probs []Problem
	if len(t.Drop) > 0 && len(t.Keep) > 0 {
		probs = append(probs, Problem{Where: "transform", Message: "drop and keep cannot both be set: keep already drops every column it does not list"})
	}
	for _, col := range slices.Sorted(maps.Keys(t.Mask)) {
		if k := t.Mask[col]; k != MaskSHA256 && k != MaskRedact {
			probs = append(probs, Problem{Where: "mask." + col, Message: fmt.Sprintf("mask %q is not one of %q, %q", k, MaskSHA256, MaskRedact)})
		}
	}
	targets := map[string]string{}
	for _, col := range slices.Sorted(maps.Keys(t.Rename)) {
		to := t.Rename[col]
		switch {
		case strings.TrimSpace(to) == "":
			probs = append(probs, Problem{Where: "rename." + col, Message: "the new name is empty"})
		case targets[to] != "":
			probs = append(probs, Problem{Where: "rename." + col, Message: fmt.Sprintf("%q is also the new name of %q: two columns cannot get one name", to, targets[to])})
		}
		targets[to] = col
	}
	return probs
}

// Columns lists every column the expressions name by a constant, with
// where: walcast validate --source checks them against the tables.
// Columns named by the transform's settings are in TransformColumns.
func (r *Rules) Columns() []Column { return slices.Clone(r.columns) }

// TransformColumns lists the columns drop, keep, mask and rename name,
// each with the setting ("drop", "mask.email" …).
func (s Spec) TransformColumns() []Column {
	t := s.Transform
	var cols []Column
	for _, c := range t.Drop {
		cols = append(cols, Column{Where: "drop", Name: c})
	}
	for _, c := range t.Keep {
		cols = append(cols, Column{Where: "keep", Name: c})
	}
	for _, c := range slices.Sorted(maps.Keys(t.Mask)) {
		cols = append(cols, Column{Where: "mask." + c, Name: c})
	}
	for _, c := range slices.Sorted(maps.Keys(t.Rename)) {
		cols = append(cols, Column{Where: "rename." + c, Name: c})
	}
	return cols
}

// HasRoute reports whether the rules set a route.
func (r *Rules) HasRoute() bool { return r != nil && r.route.prog != nil }

func set(names []string) map[string]bool {
	if len(names) == 0 {
		return nil
	}
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}
