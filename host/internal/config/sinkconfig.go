package config

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/zclconf/go-cty/cty"
	ctyjson "github.com/zclconf/go-cty/cty/json"

	"github.com/walcast/walcast/pluginkit"
)

// fieldTypes maps the attribute types a plugin can declare to cty types.
// A duration is a string here; it is parsed to check it, and handed to
// the plugin as written.
var fieldTypes = map[pluginkit.FieldType]cty.Type{
	pluginkit.TypeString:     cty.String,
	pluginkit.TypeNumber:     cty.Number,
	pluginkit.TypeBool:       cty.Bool,
	pluginkit.TypeStringList: cty.List(cty.String),
	pluginkit.TypeStringMap:  cty.Map(cty.String),
	pluginkit.TypeDuration:   cty.String,
}

// DecodeSinkConfig decodes a sink's config block against the attributes its
// plugin declares and returns it as the JSON object the plugin's Configure
// receives. Attributes left out are left out of the JSON too, so the plugin
// applies its own defaults. env() is available, as everywhere in the file.
//
// Every problem is a diagnostic inside the block: a wrong type or a bad
// duration at the value, an unknown attribute at its name (listing the
// accepted ones), a missing required attribute at the block.
func DecodeSinkConfig(body hcl.Body, fields []pluginkit.ConfigField) (json.RawMessage, hcl.Diagnostics) {
	return decodeSinkConfig(body, fields, newEvalContext(os.LookupEnv))
}

func decodeSinkConfig(body hcl.Body, fields []pluginkit.ConfigField, ctx *hcl.EvalContext) (json.RawMessage, hcl.Diagnostics) {
	if body == nil {
		body = hcl.EmptyBody()
	}
	spec, diags := configSpec(body, fields)
	if diags.HasErrors() {
		return nil, diags
	}

	val, remain, decodeDiags := hcldec.PartialDecode(body, spec, ctx)
	diags = append(diags, decodeDiags...)
	diags = append(diags, unknownConfigAttrs(remain, fields)...)
	// Durations are checked even when something else failed, so that one
	// run reports every problem in the block.
	diags = append(diags, checkDurations(body, val, fields)...)
	if diags.HasErrors() {
		return nil, diags
	}

	out := make(map[string]json.RawMessage, len(fields))
	for _, f := range fields {
		v := val.GetAttr(f.Name)
		if v.IsNull() {
			continue
		}
		b, err := ctyjson.Marshal(v, v.Type())
		if err != nil {
			// Only unknown values fail here, and there are no variables to
			// make one; keep the error anyway rather than send bad JSON.
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Invalid config value",
				Detail:   fmt.Sprintf("Cannot encode %s: %s.", f.Name, err),
				Subject:  attrExprRange(body, f.Name, body.MissingItemRange()).Ptr(),
			})
			continue
		}
		out[f.Name] = b
	}
	if diags.HasErrors() {
		return nil, diags
	}
	raw, err := json.Marshal(out) // sorted keys: the same block always gives the same bytes
	if err != nil {
		return nil, append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Invalid config",
			Detail:   err.Error(),
			Subject:  body.MissingItemRange().Ptr(),
		})
	}
	return raw, diags
}

// configSpec builds the hcldec spec for the declared fields. A field of a
// type the host does not know is the plugin's bug, reported at the block
// so that the user knows which sink to blame.
func configSpec(body hcl.Body, fields []pluginkit.ConfigField) (hcldec.ObjectSpec, hcl.Diagnostics) {
	spec := make(hcldec.ObjectSpec, len(fields))
	var diags hcl.Diagnostics
	for _, f := range fields {
		ty, ok := fieldTypes[f.Type]
		if !ok {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Unsupported config field type",
				Detail: fmt.Sprintf("The plugin declares attribute %q with type %q, which walcast does not support; this is a bug in the plugin.",
					f.Name, f.Type),
				Subject: body.MissingItemRange().Ptr(),
			})
			continue
		}
		spec[f.Name] = &hcldec.AttrSpec{Name: f.Name, Type: ty, Required: f.Required}
	}
	return spec, diags
}

// checkDurations parses every duration attribute that decoded to a string.
func checkDurations(body hcl.Body, val cty.Value, fields []pluginkit.ConfigField) hcl.Diagnostics {
	if !val.IsKnown() || val.IsNull() || !val.Type().IsObjectType() {
		return nil
	}
	var diags hcl.Diagnostics
	for _, f := range fields {
		if f.Type != pluginkit.TypeDuration || !val.Type().HasAttribute(f.Name) {
			continue
		}
		v := val.GetAttr(f.Name)
		if !v.IsKnown() || v.IsNull() || v.Type() != cty.String {
			continue
		}
		if _, diag := parseDuration(v.AsString(), attrExprRange(body, f.Name, body.MissingItemRange())); diag != nil {
			diags = append(diags, diag)
		}
	}
	return diags
}

// unknownConfigAttrs reports what PartialDecode left over: attributes the
// plugin does not declare, and any block (plugin configs are flat).
func unknownConfigAttrs(remain hcl.Body, fields []pluginkit.ConfigField) hcl.Diagnostics {
	attrs, diags := remain.JustAttributes()
	if len(attrs) == 0 {
		return diags
	}

	accepted := "this sink accepts no attributes"
	if len(fields) > 0 {
		names := make([]string, len(fields))
		for i, f := range fields {
			names[i] = f.Name
		}
		slices.Sort(names)
		accepted = "accepted: " + strings.Join(names, ", ")
	}

	unknown := make([]*hcl.Attribute, 0, len(attrs))
	for _, a := range attrs {
		unknown = append(unknown, a)
	}
	sort.Slice(unknown, func(i, j int) bool { return unknown[i].NameRange.Start.Byte < unknown[j].NameRange.Start.Byte })
	for _, a := range unknown {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Unsupported argument",
			Detail:   fmt.Sprintf("An argument named %q is not expected here; %s.", a.Name, accepted),
			Subject:  a.NameRange.Ptr(),
		})
	}
	return diags
}

// ConfigErrorDiag turns a sink's *pluginkit.ConfigError into a diagnostic
// at the attribute it names — at its value, since that is what to change —
// or at blockRange when the error is about the block as a whole or names an
// attribute that is not written.
func ConfigErrorDiag(body hcl.Body, blockRange hcl.Range, cerr *pluginkit.ConfigError, sinkID string) *hcl.Diagnostic {
	subject := blockRange
	if name := attrName(cerr.Field); name != "" {
		subject = attrExprRange(body, name, blockRange)
	}
	return &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  fmt.Sprintf("Invalid config for sink %q", sinkID),
		Detail:   cerr.Error(),
		Subject:  subject.Ptr(),
	}
}

// attrName is the attribute a ConfigError.Field refers to; a plugin may
// name a part of it, as in headers.Authorization or urls[2].
func attrName(field string) string {
	if i := strings.IndexAny(field, ".["); i >= 0 {
		return field[:i]
	}
	return field
}

// attrExprRange is where the value of attribute name is written in body,
// or fallback when it is not there.
func attrExprRange(body hcl.Body, name string, fallback hcl.Range) hcl.Range {
	if body == nil {
		return fallback
	}
	content, _, _ := body.PartialContent(&hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: name}},
	})
	if attr, ok := content.Attributes[name]; ok {
		return attr.Expr.Range()
	}
	return fallback
}
