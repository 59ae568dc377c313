package config

import (
	"fmt"
	"os"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/gocty"
)

// fileSchema is the top level of a pipeline file. Blocks are taken apart by
// hand rather than with gohcl so that their label ranges survive: most
// structural errors point at a label.
var fileSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		// Not Required: a missing name gets a message that says what the
		// name is for, rather than HCL's generic one.
		{Name: "pipeline"},
	},
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "source", LabelNames: []string{"type"}},
		{Type: "sink", LabelNames: []string{"type", "id"}},
	},
}

// Load reads and decodes the pipeline file at filename. See Parse.
func Load(filename string) (*Pipeline, hcl.Diagnostics) {
	src, err := os.ReadFile(filename)
	if err != nil {
		return nil, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Cannot read pipeline file",
			Detail:   err.Error(),
		}}
	}
	return Parse(src, filename)
}

// Parse decodes a pipeline file in HCL native syntax; filename is used in
// diagnostics only. Expressions may call env("NAME"), which fails when NAME
// is not set.
//
// Parse checks everything that can be checked without the database or the
// plugins; sink config blocks are left to DecodeSinkConfig and Check.
// Pipeline is nil only when the file is not valid HCL. Otherwise it holds
// whatever could be decoded, with defaults, even when diags has errors —
// enough for Check to report plugin problems in the same run — but it must
// not be run unless diags.HasErrors() is false.
func Parse(src []byte, filename string) (*Pipeline, hcl.Diagnostics) {
	return parse(src, filename, os.LookupEnv)
}

// lookupEnvFunc is os.LookupEnv, swapped out by tests.
type lookupEnvFunc func(name string) (string, bool)

func parse(src []byte, filename string, lookupEnv lookupEnvFunc) (*Pipeline, hcl.Diagnostics) {
	file, diags := hclparse.NewParser().ParseHCL(src, filename)
	if diags.HasErrors() {
		return nil, diags
	}
	d := decoder{ctx: newEvalContext(lookupEnv), src: src}
	p := d.decodeFile(file.Body)
	return p, append(diags, d.diags...)
}

// newEvalContext is the context every expression of a pipeline file, sink
// config blocks included, is evaluated in. There are no variables.
func newEvalContext(lookupEnv lookupEnvFunc) *hcl.EvalContext {
	return &hcl.EvalContext{
		Functions: map[string]function.Function{
			"env": envFunc(lookupEnv),
		},
	}
}

// envFunc returns env(name). An unset variable is an error rather than ""
// so that a forgotten export fails at the call, not later as an empty DSN
// or an unsigned webhook. A variable set to "" is returned as is.
func envFunc(lookupEnv lookupEnvFunc) function.Function {
	return function.New(&function.Spec{
		Description: "Returns the value of an environment variable.",
		Params: []function.Parameter{
			{Name: "name", Type: cty.String},
		},
		Type: function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			name := args[0].AsString()
			v, ok := lookupEnv(name)
			if !ok {
				return cty.NilVal, fmt.Errorf("environment variable %s is not set", name)
			}
			return cty.StringVal(v), nil
		},
	})
}

// decoder accumulates diagnostics while a file is taken apart, so that one
// run reports every problem rather than the first.
type decoder struct {
	ctx   *hcl.EvalContext
	diags hcl.Diagnostics
	// src is the file, to place errors inside expressions written as
	// strings (filter, route, set).
	src []byte
}

func (d *decoder) add(diags ...*hcl.Diagnostic) { d.diags = append(d.diags, diags...) }

func (d *decoder) errorf(subject hcl.Range, summary, detailFormat string, args ...any) {
	d.add(&hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(detailFormat, args...),
		Subject:  subject.Ptr(),
	})
}

// decodeAttr evaluates attr into target, a pointer as for
// gohcl.DecodeExpression, and reports whether it succeeded. It differs from
// gohcl in its messages: a failed evaluation (an unset env(), say) is not
// followed by a second error about the resulting unknown value, and a type
// mismatch names the attribute.
func (d *decoder) decodeAttr(attr *hcl.Attribute, target any) bool {
	val, diags := attr.Expr.Value(d.ctx)
	d.add(diags...)
	if diags.HasErrors() {
		return false
	}
	ty, err := gocty.ImpliedType(target)
	if err == nil {
		val, err = convert.Convert(val, ty)
	}
	if err == nil {
		err = gocty.FromCtyValue(val, target)
	}
	if err != nil {
		d.errorf(attr.Expr.Range(), "Incorrect attribute value type",
			"Inappropriate value for attribute %q: %s.", attr.Name, err)
		return false
	}
	return true
}

func (d *decoder) decodeFile(body hcl.Body) *Pipeline {
	content, diags := body.Content(fileSchema)
	d.add(diags...)
	p := &Pipeline{}

	if attr, ok := content.Attributes["pipeline"]; ok {
		p.NameRange = attr.Expr.Range()
		if d.decodeAttr(attr, &p.Name) {
			d.checkPipelineName(p.Name, p.NameRange)
		}
	} else {
		d.errorf(body.MissingItemRange(), "Missing pipeline name",
			`Add pipeline = "<name>" at the top of the file; it keys the checkpoints and names the replication slot and publication.`)
	}

	var sources []*hcl.Block
	var sinkBlocks []*hcl.Block
	for _, b := range content.Blocks {
		switch b.Type {
		case "source":
			sources = append(sources, b)
		case "sink":
			sinkBlocks = append(sinkBlocks, b)
		}
	}

	switch {
	case len(sources) == 0:
		d.errorf(body.MissingItemRange(), "Missing source block",
			`A pipeline captures from exactly one source "postgres" { ... } block.`)
	default:
		for _, extra := range sources[1:] {
			d.errorf(extra.DefRange, "Duplicate source block",
				"A pipeline has exactly one source; the first is at %s.", lineOf(sources[0].DefRange))
		}
		p.Source = d.decodeSource(sources[0], p)
	}

	seen := make(map[string]hcl.Range, len(sinkBlocks))
	for _, b := range sinkBlocks {
		s, ok := d.decodeSink(b, p.Source, p.Name)
		if !ok {
			continue
		}
		if first, dup := seen[s.ID]; dup {
			d.errorf(s.IDRange, "Duplicate sink id",
				"Sink id %q is already used by the sink at %s; checkpoints are keyed by sink id, so every sink needs its own.",
				s.ID, lineOf(first))
			continue
		}
		seen[s.ID] = s.DeclRange
		p.Sinks = append(p.Sinks, s)
	}
	return p
}

// lineOf names the line a range starts on, for details that refer to a
// second place in the same file.
func lineOf(r hcl.Range) string {
	return fmt.Sprintf("line %d", r.Start.Line)
}
