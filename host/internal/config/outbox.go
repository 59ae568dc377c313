package config

import (
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/walcast/walcast/host/internal/delivery/outbox"
	"github.com/walcast/walcast/pluginkit"
)

// Outbox is a sink's outbox block (docs/outbox.md): which table holds the
// application's outbox and how its columns are named.
type Outbox struct {
	outbox.Spec
	// Router is Spec ready to apply; nil when the block has errors.
	Router *outbox.Router
	// Places maps "table" and each column attribute ("key_column" …) to
	// where it was written, or the block's header for a default.
	Places map[string]hcl.Range
	// DeclRange is the block's header.
	DeclRange hcl.Range
}

// OutboxSinks are the sink types that take an outbox block: the outbox
// needs a sink that carries a key, headers and a route per event.
var OutboxSinks = []string{"kafka", "webhook"}

var outboxSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "table", Required: true},
		{Name: "id_column"},
		{Name: "key_column"},
		{Name: "route_column"},
		{Name: "payload_column"},
		{Name: "type_column"},
		{Name: "route_prefix"},
	},
}

// decodeOutbox decodes a sink's outbox block into s.Outbox, and refuses
// it on a sink that cannot carry outbox events, in another format than
// walcast's, or naming a table the sink does not receive.
func (d *decoder) decodeOutbox(s *Sink, block *hcl.Block, src Source) {
	if block == nil {
		return
	}
	content, diags := block.Body.Content(outboxSchema)
	d.add(diags...)
	attrs := content.Attributes
	o := &Outbox{DeclRange: block.DefRange, Places: map[string]hcl.Range{}}
	var table string
	if attr := attrs["table"]; attr != nil {
		if d.decodeAttr(attr, &table) {
			o.Places["table"] = attr.Expr.Range()
		}
	}
	o.Spec = outbox.Defaults(table)
	usable := !diags.HasErrors()
	for _, c := range []struct {
		name   string
		target *string
	}{
		{"id_column", &o.IDColumn}, {"key_column", &o.KeyColumn}, {"route_column", &o.RouteColumn},
		{"payload_column", &o.PayloadColumn}, {"type_column", &o.TypeColumn},
	} {
		o.Places[c.name] = block.DefRange
		attr := attrs[c.name]
		if attr == nil || !d.decodeAttr(attr, c.target) {
			continue
		}
		o.Places[c.name] = attr.Expr.Range()
		if *c.target == "" {
			usable = false
			d.errorf(attr.Expr.Range(), "Empty outbox column", "%s names no column; remove it for the default.", c.name)
		}
	}
	if attr := attrs["route_prefix"]; attr != nil {
		d.decodeAttr(attr, &o.RoutePrefix)
	}
	s.Outbox = o
	if d.checkOutbox(s, src, attrs["table"]) && usable {
		r, err := outbox.New(o.Spec)
		if err != nil {
			d.errorf(block.DefRange, "Invalid outbox block", "%s.", err)
			return
		}
		o.Router = r
	}
}

// checkOutbox refuses what an outbox block cannot work with, each at its
// place in the file, and reports whether the block is usable.
func (d *decoder) checkOutbox(s *Sink, src Source, tableAttr *hcl.Attribute) bool {
	o := s.Outbox
	ok := true
	if !slices.Contains(OutboxSinks, s.Type) {
		why := ""
		if slices.Contains(envelopeReaders, s.Type) {
			why = " The " + s.Type + " sink reads walcast's envelope of each change, and an outbox event has none."
		}
		d.errorf(o.DeclRange, "Outbox not supported by this sink",
			"The outbox needs a sink that carries a key, headers and a route per event: %s.%s Move the outbox block to such a sink.",
			strings.Join(OutboxSinks, " or "), why)
		ok = false
	}
	if s.Format != FormatWalcast {
		d.errorf(o.DeclRange, "Outbox needs the walcast format",
			`Sink %q has format = %q: an outbox event's body is the payload column as it is, never a change event; remove the format or the outbox block.`, s.ID, s.Format)
		ok = false
	}
	if tableAttr == nil || o.Table == "" {
		return false
	}
	if schema, table, cut := strings.Cut(o.Table, "."); !cut || schema == "" || table == "" {
		d.errorf(tableAttr.Expr.Range(), "Invalid outbox table", `The outbox table must be "schema.table", got %q.`, o.Table)
		return false
	}
	if tables := SinkTables(&src, s); len(src.Tables) > 0 && !slices.Contains(tables, o.Table) {
		d.errorf(tableAttr.Expr.Range(), "Outbox table not received",
			"Table %q is not among the tables sink %q receives (%s): add it to the source's tables (and the sink's, if it has a tables list).",
			o.Table, s.ID, strings.Join(tables, ", "))
		ok = false
	}
	if len(s.Ops) > 0 && !slices.Contains(s.Ops, pluginkit.OpInsert) {
		d.errorf(o.DeclRange, "Outbox without inserts",
			`Sink %q's ops leave out "insert", and only inserts into the outbox table publish events: add "insert" to ops.`, s.ID)
		ok = false
	}
	return ok
}

// OutboxRouter returns the sink's outbox router, nil without an outbox
// block.
func (s *Sink) OutboxRouter() *outbox.Router {
	if s.Outbox == nil {
		return nil
	}
	return s.Outbox.Router
}
