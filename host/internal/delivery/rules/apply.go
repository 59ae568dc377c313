package rules

import (
	"bytes"
	"fmt"
	"strings"
	"time"
	"unsafe"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/interpreter"

	"github.com/walcast/walcast/pluginkit/cdc"
)

// Result is what Apply made of an event.
type Result struct {
	// Keep is false when the filter rejected the event: the sink does not
	// receive it.
	Keep bool
	// Event is the event the sink receives: Key and Payload transformed,
	// Route set. The id and everything else are the captured event's.
	Event cdc.Event
	// OldKey is the old key (an update that changed the key) transformed;
	// nil when the key did not change, or no longer differs.
	OldKey []byte
}

// Apply runs the filter, the route and the transform on ev (the walcast
// envelope; oldKey as change.Event.OldKey). An error names the expression
// that failed and why; ev is then to be parked as it is.
func (r *Rules) Apply(ev cdc.Event, oldKey []byte) (Result, error) {
	c := fastCtx{ev: ev}
	if r.filter.prog != nil {
		keep, err := r.keeps(&c)
		if err != nil {
			return Result{}, err
		}
		if !keep {
			return Result{Keep: false, Event: ev}, nil
		}
	}
	res := Result{Keep: true, Event: ev, OldKey: oldKey}
	if r.route.prog != nil {
		route, err := r.routeOf(&c)
		if err != nil {
			return Result{}, err
		}
		res.Event.Route = route
	}
	if !r.transforms() {
		return res, nil
	}
	computed := make([]computedField, 0, len(r.set))
	for _, f := range r.set {
		vars := c.celVars(r.needsChanged)
		if vars.newRow().raw == nil {
			break // a delete, a truncate: no new row to add to
		}
		out, _, err := f.prog.Eval(vars)
		if err != nil {
			return Result{}, fmt.Errorf("set.%s: %w", f.name, err)
		}
		raw, err := toJSON(out)
		if err != nil {
			return Result{}, fmt.Errorf("set.%s: %w", f.name, err)
		}
		computed = append(computed, computedField{name: f.name, value: raw})
	}
	payload, key, err := r.rewrite(ev.Payload, ev.Key, computed)
	if err != nil {
		return Result{}, fmt.Errorf("transform: %w", err)
	}
	res.Event.Payload, res.Event.Key = payload, key
	if oldKey != nil {
		ok, _ := r.rewriteRow(nil, oldKey, rowKey, nil)
		if bytes.Equal(ok, key) {
			ok = nil
		}
		res.OldKey = ok
	}
	return res, nil
}

// keeps runs the filter: on the fast path when it has one and it gives
// a bool, else with CEL (which also words every error).
func (r *Rules) keeps(c *fastCtx) (bool, error) {
	if r.filter.fast != nil {
		if v, ok := r.filter.fast.eval(c); ok && v.k == fBool {
			return v.b, nil
		}
	}
	out, _, err := r.filter.prog.Eval(c.celVars(r.needsChanged))
	if err != nil {
		return false, fmt.Errorf("filter: %w", err)
	}
	keep, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("filter: the expression gave %s, not a bool", out.Type().TypeName())
	}
	return bool(keep), nil
}

// routeOf runs the route as keeps runs the filter.
func (r *Rules) routeOf(c *fastCtx) (string, error) {
	if r.route.fast != nil {
		if v, ok := r.route.fast.eval(c); ok && v.k == fString && v.s != "" {
			return ownString(v.s, c.ev.Payload), nil
		}
	}
	out, _, err := r.route.prog.Eval(c.celVars(r.needsChanged))
	if err != nil {
		return "", fmt.Errorf("route: %w", err)
	}
	s, ok := out.(types.String)
	if !ok || s == "" {
		return "", fmt.Errorf("route: the expression gave %s, not a destination name", describe(out))
	}
	return string(s), nil
}

// ownString returns s, copied when it points into payload: a fast-path
// string read from a column does (fast.go), and the route outlives the
// evaluation.
func ownString(s string, payload []byte) string {
	if len(s) == 0 || cap(payload) == 0 {
		return s
	}
	p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
	base := uintptr(unsafe.Pointer(unsafe.SliceData(payload[:cap(payload)])))
	if p >= base && p < base+uintptr(cap(payload)) {
		return strings.Clone(s)
	}
	return s
}

// celVars is the CEL activation of c's event, made when first needed:
// an event that the fast path decides entirely never makes one.
func (c *fastCtx) celVars(wantsChanged bool) *vars {
	if c.vars == nil {
		c.vars = &vars{ev: c.ev, wantsChanged: wantsChanged}
	}
	return c.vars
}

func (r *Rules) transforms() bool {
	return len(r.drop) > 0 || len(r.keep) > 0 || len(r.mask) > 0 || len(r.rename) > 0 || len(r.set) > 0
}

func describe(v ref.Val) string {
	if s, ok := v.(types.String); ok && s == "" {
		return "an empty string"
	}
	return v.Type().TypeName()
}

// vars is the activation of one event: each variable is made when an
// expression first reads it.
type vars struct {
	// ev is a copy: the activation escapes to CEL (to the heap), the
	// event Apply was given need not.
	ev           cdc.Event
	wantsChanged bool
	key, nu, old *row
}

var _ interpreter.Activation = (*vars)(nil)

func (v *vars) Parent() interpreter.Activation { return nil }

func (v *vars) ResolveName(name string) (any, bool) {
	ev := &v.ev
	switch name {
	case "op":
		return types.String(ev.Op), true
	case "schema":
		return types.String(ev.Schema), true
	case "table":
		return types.String(ev.Table), true
	case "id":
		return types.String(ev.ID.String()), true
	case "xid":
		x, _ := ev.Member("xid")
		return jsonValue(x), true
	case "commit_time":
		return commitTime(ev), true
	case "key":
		if v.key == nil {
			v.key = newRow(ev.Key)
		}
		return v.key, true
	case "new":
		return v.newRow(), true
	case "old":
		return v.oldRow(), true
	case "changed":
		return types.NewStringList(types.DefaultTypeAdapter, v.changed()), true
	}
	return nil, false
}

func (v *vars) newRow() *row {
	if v.nu == nil {
		raw, _ := v.ev.Member("new")
		v.nu = newRow(raw)
	}
	return v.nu
}

func (v *vars) oldRow() *row {
	if v.old == nil {
		raw, _ := v.ev.Member("old")
		v.old = newRow(raw)
	}
	return v.old
}

// changed lists the columns of an update whose old value is known (in
// old: the key columns, every column with REPLICA IDENTITY FULL) and
// differs from the new one. An unchanged TOASTed column is not in new and
// not changed. Other events change nothing this way.
func (v *vars) changed() []string {
	if v.ev.Op != cdc.OpUpdate {
		return []string{}
	}
	nu, old := v.newRow(), v.oldRow()
	if old.raw == nil || nu.raw == nil {
		return []string{}
	}
	out := []string{}
	_ = cdc.EachMember(old.raw, func(name, before []byte) error {
		after, found := cdc.Member(nu.raw, string(name))
		if found && !bytes.Equal(before, after) {
			out = append(out, jsonString(name))
		}
		return nil
	})
	return out
}

func commitTime(ev *cdc.Event) ref.Val {
	raw, ok := ev.Member("commit_time")
	if !ok || len(raw) < 2 || raw[0] != '"' {
		return types.NullValue
	}
	t, err := time.Parse(time.RFC3339Nano, string(raw[1:len(raw)-1]))
	if err != nil {
		return types.NewErr("commit_time %s: %v", raw, err)
	}
	return types.Timestamp{Time: t}
}
