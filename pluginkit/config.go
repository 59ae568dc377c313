package pluginkit

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
