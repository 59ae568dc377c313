package config

import (
	"fmt"
	"slices"

	"github.com/hashicorp/hcl/v2"

	"github.com/walcast/walcast/pluginkit"
)

// SinkTables are the tables sink s can receive events of, as its plugin is
// told (pluginkit.TablesFrom): its tables filter when it has one, else
// every table of the source.
func SinkTables(src *Source, s *Sink) []string {
	if len(s.Tables) > 0 {
		return slices.Clone(s.Tables)
	}
	return slices.Clone(src.Tables)
}

// ConfigErrorDiags turns every *pluginkit.ConfigError in err into a
// diagnostic (see ConfigErrorDiag). An error about a table (ConfigError.Table)
// whose Field is not written in the config block points at that table in
// the source's tables list, which is where the user wrote the name that
// cannot be routed. It returns nil when err holds no ConfigError.
func ConfigErrorDiags(src *Source, s *Sink, err error) hcl.Diagnostics {
	var diags hcl.Diagnostics
	for _, cerr := range pluginkit.ConfigErrors(err) {
		d := ConfigErrorDiag(s.Config, s.ConfigRange, cerr, s.ID)
		if cerr.Table != "" && !attrWritten(s.Config, attrName(cerr.Field)) {
			if i := slices.Index(src.Tables, cerr.Table); i >= 0 && i < len(src.TableRanges) {
				d.Subject = src.TableRanges[i].Ptr()
				d.Detail = fmt.Sprintf("Table %s: %s", cerr.Table, d.Detail)
			}
		}
		diags = append(diags, d)
	}
	return diags
}

// attrWritten reports whether body sets attribute name.
func attrWritten(body hcl.Body, name string) bool {
	if body == nil || name == "" {
		return false
	}
	content, _, _ := body.PartialContent(&hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: name}}})
	_, ok := content.Attributes[name]
	return ok
}
