package pluginkit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// FieldType is the HCL type of a config attribute.
type FieldType string

// The attribute types a sink can declare.
const (
	TypeString     FieldType = "string"
	TypeNumber     FieldType = "number"
	TypeBool       FieldType = "bool"
	TypeStringList FieldType = "list(string)"
	TypeStringMap  FieldType = "map(string)"
	// TypeDuration is a string such as "30s", checked with time.ParseDuration.
	TypeDuration FieldType = "duration"
)

// ConfigField declares one attribute of a sink's `config` block. The host
// checks a pipeline against these declarations (types, required attributes,
// unknown attributes) before the sink sees it.
type ConfigField struct {
	Name     string
	Type     FieldType
	Required bool
	Doc      string
}

// DecodeConfig decodes the config block Configure receives (a JSON object)
// into v, the sink's config struct with json tags. A value of the wrong
// type or an attribute v has no field for comes back as a *ConfigError
// naming the attribute, which the host reports at that attribute's line
// in the pipeline file.
func DecodeConfig(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return &ConfigError{Field: te.Field, Msg: "must be a " + te.Type.String()}
		}
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return &ConfigError{Field: strings.Trim(name, `"`), Msg: "is not an attribute of this sink"}
		}
		return &ConfigError{Msg: fmt.Sprintf("decode config: %v", err)}
	}
	return nil
}
