package config

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/walcast/walcast/pluginkit"
)

var sinkSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "durable"},
		{Name: "tables"},
		{Name: "ops"},
		{Name: "env"},
		{Name: "format"},
		{Name: "filter"},
		{Name: "route"},
	},
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "delivery"},
		{Type: "config"},
		{Type: "debezium"},
		{Type: "cloudevents"},
		{Type: "transform"},
		{Type: "outbox"},
	},
}

var deliverySchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "batch_size"},
		{Name: "rate_limit"},
		{Name: "ordering"},
		{Name: "max_in_flight"},
		{Name: "retry_base"},
		{Name: "max_attempts"},
		{Name: "deliver_timeout"},
		{Name: "detach_after"},
		{Name: "throttle_min"},
		{Name: "throttle_max"},
	},
}

// knownOps are the values of a sink's ops filter, in envelope order.
var knownOps = []pluginkit.Op{pluginkit.OpInsert, pluginkit.OpUpdate, pluginkit.OpDelete, pluginkit.OpTruncate, pluginkit.OpRead,
	pluginkit.OpSchema, pluginkit.OpResyncBegin, pluginkit.OpResyncEnd, pluginkit.OpMessage, pluginkit.OpDetach}

// decodeSink decodes a sink block. ok is false when the header is unusable
// (bad type or id): such a sink is left out of the pipeline, so that Check
// never goes looking for a plugin named "../x".
func (d *decoder) decodeSink(block *hcl.Block, src Source, pipeline string) (s Sink, ok bool) {
	s = Sink{
		Type:        block.Labels[0],
		ID:          block.Labels[1],
		Durable:     defaultDurable(block.Labels[0]),
		Delivery:    DefaultDelivery(),
		DeclRange:   block.DefRange,
		TypeRange:   block.LabelRanges[0],
		IDRange:     block.LabelRanges[1],
		ConfigRange: block.DefRange,
		Config:      emptyBodyAt(block.DefRange),
	}
	ok = true
	if problem := checkSinkType(s.Type); problem != "" {
		d.errorf(s.TypeRange, "Invalid sink type", "Sink type %q %s.", s.Type, problem)
		ok = false
	}
	if problem := checkSinkID(s.ID); problem != "" {
		d.errorf(s.IDRange, "Invalid sink id", "Sink id %q %s.", s.ID, problem)
		ok = false
	}

	content, diags := block.Body.Content(sinkSchema)
	d.add(diags...)
	attrs := content.Attributes

	if attr, found := attrs["durable"]; found {
		d.decodeAttr(attr, &s.Durable)
	}
	if attr, found := attrs["tables"]; found {
		tables, ranges, decoded := d.decodeStringList(attr)
		if decoded {
			d.checkSinkTables(tables, ranges, attr.Expr.Range(), src)
		}
		s.Tables = tables
	}
	if attr, found := attrs["ops"]; found {
		s.Ops = d.decodeOps(attr)
		if i := slices.Index(s.Ops, pluginkit.OpMessage); i >= 0 && len(src.Messages.Prefixes) == 0 {
			d.errorf(attr.Expr.Range(), "No messages to deliver",
				`ops lists "message", but the source captures no messages: add messages { prefixes = ["app."] } to the source block, or remove "message" from ops.`)
		}
	}
	if attr, found := attrs["env"]; found {
		s.Env = d.decodeEnv(attr)
	}

	blocks := make(map[string]*hcl.Block, len(content.Blocks))
	for _, b := range content.Blocks {
		if first, dup := blocks[b.Type]; dup {
			d.errorf(b.DefRange, "Duplicate "+b.Type+" block",
				"A sink has at most one %s block; the first is at %s.", b.Type, lineOf(first.DefRange))
			continue
		}
		blocks[b.Type] = b
	}
	if b := blocks["delivery"]; b != nil {
		s.Delivery = d.decodeDelivery(b.Body)
	}
	if b := blocks["config"]; b != nil {
		s.Config = b.Body
		s.ConfigRange = b.DefRange
	}
	d.decodeFormat(&s, attrs["format"], blocks["debezium"], pipeline)
	d.decodeCloudEvents(&s, blocks["cloudevents"])
	d.decodeRules(&s, attrs["filter"], attrs["route"], blocks["transform"])
	d.decodeOutbox(&s, blocks["outbox"], src)
	return s, ok
}

// emptyBodyAt stands in for an absent config block. Its missing-item range
// is the sink header, so "missing required attribute" points at the sink.
func emptyBodyAt(rng hcl.Range) hcl.Body {
	return &hclsyntax.Body{
		Attributes: hclsyntax.Attributes{},
		SrcRange:   rng,
		EndRange:   rng,
	}
}

func (d *decoder) checkSinkTables(tables []string, ranges []hcl.Range, listRange hcl.Range, src Source) {
	if len(tables) == 0 {
		d.errorf(listRange, "Empty tables filter",
			"An empty filter would deliver nothing; remove tables to deliver every source table.")
		return
	}
	if len(src.Tables) == 0 {
		return // the source's own error says enough
	}
	for i, t := range tables {
		if !slices.Contains(src.Tables, t) {
			d.errorf(ranges[i], "Table not captured",
				"Table %q is not among the source tables (%s), so this sink would never see it.",
				t, strings.Join(src.Tables, ", "))
		}
	}
}

// envName is a portable environment variable name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// decodeEnv decodes a sink's env map: variables its plugin process gets
// on top of the few it always gets (sinkclient.AllowedEnv).
func (d *decoder) decodeEnv(attr *hcl.Attribute) map[string]string {
	var env map[string]string
	if !d.decodeAttr(attr, &env) {
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if !envName.MatchString(k) {
			d.errorf(attr.Expr.Range(), "Invalid environment variable name",
				"%q is not a variable name: letters, digits and '_', not starting with a digit.", k)
		}
	}
	return env
}

func (d *decoder) decodeOps(attr *hcl.Attribute) []pluginkit.Op {
	vals, ranges, ok := d.decodeStringList(attr)
	if !ok {
		return nil
	}
	if len(vals) == 0 {
		d.errorf(attr.Expr.Range(), "Empty ops filter",
			"An empty filter would deliver nothing; remove ops to deliver every operation.")
		return nil
	}
	ops := make([]pluginkit.Op, 0, len(vals))
	for i, v := range vals {
		op := pluginkit.Op(v)
		switch {
		case !slices.Contains(knownOps, op):
			d.errorf(ranges[i], "Invalid operation",
				"Operation %q is not one of insert, update, delete, truncate, read, schema, resync_begin, resync_end, message, detach.", v)
		case slices.Contains(ops, op):
			d.errorf(ranges[i], "Duplicate operation", "Operation %q is listed twice.", v)
		default:
			ops = append(ops, op)
		}
	}
	return ops
}

func (d *decoder) decodeDelivery(body hcl.Body) Delivery {
	content, diags := body.Content(deliverySchema)
	d.add(diags...)
	attrs := content.Attributes
	dl := DefaultDelivery()

	d.decodeInt(attrs["batch_size"], &dl.BatchSize, 1, MaxBatchSize)
	d.decodeInt(attrs["max_in_flight"], &dl.MaxInFlight, 1, unbounded)
	d.decodeInt(attrs["max_attempts"], &dl.MaxAttempts, 1, unbounded)
	if attr, ok := attrs["max_in_flight"]; ok {
		dl.MaxInFlightRange = attr.Expr.Range().Ptr()
	}
	if attr, ok := attrs["batch_size"]; ok {
		dl.BatchSizeRange = attr.Expr.Range().Ptr()
	}

	if attr, ok := attrs["rate_limit"]; ok {
		var v float64
		if d.decodeAttr(attr, &v) {
			if v < 0 || math.IsInf(v, 0) {
				d.errorf(attr.Expr.Range(), "Invalid rate_limit",
					"rate_limit is in events per second and must be 0 (unlimited) or more, got %v.", v)
			} else {
				dl.RateLimit = v
			}
		}
	}

	if attr, ok := attrs["ordering"]; ok {
		var v string
		if d.decodeAttr(attr, &v) {
			if v != OrderingRow && v != OrderingStrict {
				d.errorf(attr.Expr.Range(), "Invalid ordering",
					`ordering must be "row" (each row in commit order, rows in parallel) or "strict" (one batch at a time in commit order), got %q.`, v)
			} else {
				dl.Ordering = v
			}
		}
	}

	d.decodePositiveDuration(attrs["retry_base"], &dl.RetryBase)
	d.decodePositiveDuration(attrs["deliver_timeout"], &dl.DeliverTimeout)
	d.decodePositiveDuration(attrs["detach_after"], &dl.DetachAfter)
	d.decodePositiveDuration(attrs["throttle_min"], &dl.ThrottleMin)
	d.decodePositiveDuration(attrs["throttle_max"], &dl.ThrottleMax)
	if dl.ThrottleMin > dl.ThrottleMax {
		attr := attrs["throttle_min"]
		if attr == nil {
			attr = attrs["throttle_max"]
		}
		d.errorf(attr.Expr.Range(), "Invalid "+attr.Name,
			"throttle_min (%s) is longer than throttle_max (%s): the pause of a throttled sink cannot be both; lower throttle_min or raise throttle_max.",
			dl.ThrottleMin, dl.ThrottleMax)
	}

	if dl.Ordering == OrderingStrict && dl.MaxInFlightRange != nil && dl.MaxInFlight > 1 {
		d.add(&hcl.Diagnostic{
			Severity: hcl.DiagWarning,
			Summary:  "max_in_flight has no effect",
			Detail: fmt.Sprintf(`ordering = "strict" keeps one batch in flight, so max_in_flight = %d is ignored.`,
				dl.MaxInFlight),
			Subject: dl.MaxInFlightRange,
		})
	}
	return dl
}

// decodePositiveDuration decodes an optional duration attribute into
// *target when it is positive; target keeps its default otherwise.
func (d *decoder) decodePositiveDuration(attr *hcl.Attribute, target *time.Duration) {
	if attr == nil {
		return
	}
	v, ok := d.decodeDuration(attr)
	if !ok {
		return
	}
	if v <= 0 {
		d.errorf(attr.Expr.Range(), "Invalid "+attr.Name, "%s must be positive, got %s.", attr.Name, v)
		return
	}
	*target = v
}

// decodeInt decodes an optional whole-number attribute into *target when
// it is within [lo, hi]; target keeps its default otherwise.
func (d *decoder) decodeInt(attr *hcl.Attribute, target *int, lo, hi int) {
	if attr == nil {
		return
	}
	// Decoded as a float so that 2.5 gets a plain message rather than
	// gocty's int64 bounds.
	var v float64
	if !d.decodeAttr(attr, &v) {
		return
	}
	var problem string
	switch {
	case v != math.Trunc(v):
		problem = "a whole number"
	case v < float64(lo) && hi == unbounded:
		problem = fmt.Sprintf("at least %d", lo)
	case v < float64(lo) || v > float64(hi):
		problem = fmt.Sprintf("between %d and %d", lo, hi)
	}
	if problem != "" {
		d.errorf(attr.Expr.Range(), "Invalid "+attr.Name, "%s must be %s, got %v.", attr.Name, problem, v)
		return
	}
	*target = int(v)
}

// unbounded is the upper limit of counts that have no natural one; it
// keeps int conversions safe on every platform.
const unbounded = math.MaxInt32
