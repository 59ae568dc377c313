package config

import (
	"maps"
	"slices"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/walcast/walcast/host/internal/delivery/rules"
)

// Rules is what a sink's filter, route and transform say, and where each
// part was written, so that any problem with an expression, found now or
// by `walcast validate --source`, points inside it.
type Rules struct {
	rules.Spec
	// Compiled is Spec compiled, nil when Spec is empty or has errors
	// (the file then does not run).
	Compiled *rules.Rules
	// Places maps a rules.Problem's or rules.Column's Where ("filter",
	// "route", "set.region", "mask.email", "drop" …) to where it was
	// written.
	Places map[string]Place
}

// Place is where an expression or a setting was written: Range is the
// whole of it; Text, for an expression written as a quoted string, maps
// a position inside the expression to the file.
type Place struct {
	Range hcl.Range
	// src and quoted: the file's bytes, and whether Range starts at the
	// opening quote of a one-part string (positions inside it can then be
	// mapped through its escapes).
	src    []byte
	quoted bool
}

// At returns where line (from 1) and column (from 0, in characters) of
// the expression are in the file; the whole range when they cannot be
// mapped (line 0, or a heredoc or template).
func (p Place) At(line, column int) hcl.Range {
	if line <= 0 || !p.quoted || p.Range.Start.Byte >= len(p.src) {
		return p.Range
	}
	pos := p.Range.Start
	b := pos.Byte + 1 // past the quote
	pos.Byte, pos.Column = b, pos.Column+1
	l, c := 1, 0 // the expression's line and column at b
	for b < p.Range.End.Byte-1 && (l < line || (l == line && c < column)) {
		r, size := utf8.DecodeRune(p.src[b:])
		decoded := r
		if r == '\\' && b+1 < len(p.src) {
			size = escapeSize(p.src[b+1:])
			if p.src[b+1] == 'n' {
				decoded = '\n'
			}
		} else if (r == '$' || r == '%') && b+2 < len(p.src) && p.src[b+1] == byte(r) && p.src[b+2] == '{' {
			size = 2 // $${ is ${ in the string
		}
		if decoded == '\n' {
			l, c = l+1, 0
		} else {
			c++
		}
		pos.Column += utf8.RuneCount(p.src[b : b+size])
		b += size
		pos.Byte = b
		if r == '\n' { // a newline in the file itself (HCL refuses it in a quoted string; defensive)
			pos.Line, pos.Column = pos.Line+1, 1
		}
	}
	end := pos
	end.Byte, end.Column = pos.Byte+1, pos.Column+1
	return hcl.Range{Filename: p.Range.Filename, Start: pos, End: end}
}

// escapeSize is the length in the file of the escape after a backslash.
func escapeSize(rest []byte) int {
	switch rest[0] {
	case 'u':
		return 6
	case 'U':
		return 10
	}
	return 2
}

var transformSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "drop"},
		{Name: "keep"},
		{Name: "mask"},
		{Name: "rename"},
		{Name: "set"},
	},
}

// decodeRules decodes a sink's filter and route attributes and transform
// block, and compiles them, so that a syntax or type error is reported at
// its place in the file.
func (d *decoder) decodeRules(s *Sink, filter, route *hcl.Attribute, transform *hcl.Block) {
	s.Rules.Places = map[string]Place{}
	if filter != nil {
		s.Rules.Filter = d.decodeExpr(filter, "filter", &s.Rules)
	}
	if route != nil {
		s.Rules.Route = d.decodeExpr(route, "route", &s.Rules)
	}
	if transform != nil {
		s.Rules.Places["transform"] = Place{Range: transform.DefRange}
		d.decodeTransform(transform, &s.Rules)
	}
	if s.Rules.Empty() {
		return
	}
	if s.Format != FormatWalcast {
		d.errorf(s.DeclRange, "Filter, route and transform need the walcast format",
			`Sink %q has format = %q: filter, route and transform work on walcast's envelope; remove them or the format.`, s.ID, s.Format)
	}
	compiled, probs := rules.Compile(s.Rules.Spec)
	s.Rules.Compiled = compiled
	for _, p := range probs {
		d.errorf(s.Rules.Place(p.Where, s.DeclRange).At(p.Line, p.Column), "Invalid "+placeKind(p.Where),
			"%s.", p.Error())
	}
}

// Place returns where the expression or setting where was written, or
// fallback.
func (r Rules) Place(where string, fallback hcl.Range) Place {
	if p, ok := r.Places[where]; ok {
		return p
	}
	return Place{Range: fallback}
}

func placeKind(where string) string {
	switch where {
	case "filter":
		return "filter"
	case "route":
		return "route"
	}
	return "transform"
}

func (d *decoder) decodeExpr(attr *hcl.Attribute, where string, r *Rules) string {
	var text string
	if !d.decodeAttr(attr, &text) {
		return ""
	}
	r.Places[where] = d.place(attr.Expr)
	if text == "" {
		d.errorf(attr.Expr.Range(), "Empty "+where, "An empty %s means nothing; remove the attribute.", where)
	}
	return text
}

// place records where expr is; a one-part quoted string can be mapped
// inside.
func (d *decoder) place(expr hcl.Expression) Place {
	p := Place{Range: expr.Range(), src: d.src}
	if t, ok := expr.(*hclsyntax.TemplateExpr); ok && len(t.Parts) == 1 && t.SrcRange.Start.Byte < len(d.src) {
		p.quoted = d.src[t.SrcRange.Start.Byte] == '"'
	}
	return p
}

func (d *decoder) decodeTransform(block *hcl.Block, r *Rules) {
	content, diags := block.Body.Content(transformSchema)
	d.add(diags...)
	attrs := content.Attributes
	t := &r.Transform
	if attr := attrs["drop"]; attr != nil {
		t.Drop, _, _ = d.decodeStringList(attr)
		r.Places["drop"] = Place{Range: attr.Expr.Range()}
	}
	if attr := attrs["keep"]; attr != nil {
		t.Keep, _, _ = d.decodeStringList(attr)
		r.Places["keep"] = Place{Range: attr.Expr.Range()}
	}
	t.Mask = d.decodeStringMap(attrs["mask"], "mask", r)
	t.Rename = d.decodeStringMap(attrs["rename"], "rename", r)
	t.Set = d.decodeStringMap(attrs["set"], "set", r)
	if len(t.Drop)+len(t.Keep)+len(t.Mask)+len(t.Rename)+len(t.Set) == 0 && !diags.HasErrors() {
		d.errorf(block.DefRange, "Empty transform block", "A transform block needs at least one of drop, keep, mask, rename, set; remove it otherwise.")
	}
}

// decodeStringMap decodes a map of strings, recording where each value was
// written under "<name>.<key>".
func (d *decoder) decodeStringMap(attr *hcl.Attribute, name string, r *Rules) map[string]string {
	if attr == nil {
		return nil
	}
	var m map[string]string
	if !d.decodeAttr(attr, &m) {
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		r.Places[name+"."+k] = Place{Range: attr.Expr.Range()}
	}
	obj, ok := attr.Expr.(*hclsyntax.ObjectConsExpr)
	if !ok {
		return m
	}
	for _, item := range obj.Items {
		kv, diags := item.KeyExpr.Value(d.ctx)
		if diags.HasErrors() || !kv.Type().Equals(cty.String) || kv.IsNull() {
			continue
		}
		key := kv.AsString()
		if name == "set" {
			r.Places[name+"."+key] = d.place(item.ValueExpr)
		} else {
			r.Places[name+"."+key] = Place{Range: hcl.RangeBetween(item.KeyExpr.Range(), item.ValueExpr.Range())}
		}
	}
	return m
}
