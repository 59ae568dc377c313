package config

import (
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Output formats a sink can choose (docs/formats.md).
const (
	FormatWalcast  = "walcast"
	FormatDebezium = "debezium"
	FormatSequin   = "sequin"
	// FormatCloudEvents is CloudEvents 1.0; the webhook and kafka sinks
	// carry it in structured or binary mode (their cloudevents_mode).
	FormatCloudEvents = "cloudevents"
)

// cloudEventsModeSetting is the plugin setting of the webhook and kafka
// sinks that only a sink with format = "cloudevents" may set.
const cloudEventsModeSetting = "cloudevents_mode"

// Decimal handling modes of the debezium format.
const (
	DecimalPrecise = "precise"
	DecimalDouble  = "double"
	DecimalString  = "string"
)

// Debezium is a sink's `debezium` block: the settings of format
// "debezium".
type Debezium struct {
	// Name is the logical server name (Debezium's topic.prefix) in
	// source.name and the schema names; default the pipeline's name.
	Name string
	// Schemas wraps key and value in {"schema":…,"payload":…}, as Kafka
	// Connect's JSON converter with schemas.enable=true.
	Schemas bool
	// DecimalHandling is precise (default), double or string.
	DecimalHandling string
}

// CloudEvents is a sink's `cloudevents` block: the settings of format
// "cloudevents".
type CloudEvents struct {
	// TypePrefix starts every event's type attribute,
	// <type_prefix>.<schema>.<table>.<op>; empty for the default,
	// "com.walcast".
	TypePrefix string
}

var cloudEventsSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "type_prefix"}},
}

// decodeCloudEvents decodes a sink's cloudevents block, which only a sink
// with format = "cloudevents" may have.
func (d *decoder) decodeCloudEvents(s *Sink, block *hcl.Block) {
	if block == nil {
		return
	}
	if s.Format != FormatCloudEvents {
		d.errorf(block.DefRange, "CloudEvents block without the cloudevents format",
			`A cloudevents block sets up format = "cloudevents"; add that attribute to the sink or remove the block.`)
		return
	}
	content, diags := block.Body.Content(cloudEventsSchema)
	d.add(diags...)
	attr, ok := content.Attributes["type_prefix"]
	if !ok {
		return
	}
	var v string
	if !d.decodeAttr(attr, &v) {
		return
	}
	if v == "" || strings.HasSuffix(v, ".") || strings.ContainsAny(v, " \t\n") {
		d.errorf(attr.Expr.Range(), "Invalid type_prefix",
			`type_prefix starts every CloudEvent's type, <type_prefix>.<schema>.<table>.<op>: write a reverse-DNS name without spaces or a trailing dot ("com.example.shop"), or remove it for "com.walcast"; got %q.`, v)
		return
	}
	s.CloudEvents.TypePrefix = v
}

// envelopeReaders are the built-in sinks whose plugins read the
// envelope's fields rather than forward the event's bytes.
var envelopeReaders = []string{"postgres", "s3"}

var debeziumSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "name"},
		{Name: "schemas"},
		{Name: "decimal_handling_mode"},
	},
}

// decodeFormat decodes a sink's format attribute and debezium block into s.
func (d *decoder) decodeFormat(s *Sink, attr *hcl.Attribute, block *hcl.Block, pipeline string) {
	s.Format = FormatWalcast
	if attr != nil {
		var v string
		if d.decodeAttr(attr, &v) {
			switch v {
			case FormatWalcast, FormatDebezium, FormatSequin, FormatCloudEvents:
				s.Format = v
				if v != FormatWalcast && slices.Contains(envelopeReaders, s.Type) {
					d.errorf(attr.Expr.Range(), "Format not supported by this sink",
						`The %s sink reads walcast's envelope (it applies rows, or lays files out by commit time), so it takes only format = "walcast"; put the %s format on a sink that forwards events (webhook, kafka, stdout, sse, grpc, rabbitmq).`, s.Type, v)
				}
			default:
				d.errorf(attr.Expr.Range(), "Invalid format",
					`format must be "walcast" (walcast's envelope, the default), "debezium" (Debezium's PostgreSQL change event), "sequin" (Sequin's message) or "cloudevents" (CloudEvents 1.0), got %q.`, v)
			}
		}
	}
	d.checkCloudEventsMode(s)
	if block == nil {
		if s.Format == FormatDebezium {
			s.Debezium = Debezium{Name: pipeline, DecimalHandling: DecimalPrecise}
		}
		return
	}
	if s.Format != FormatDebezium {
		d.errorf(block.DefRange, "Debezium block without the debezium format",
			`A debezium block sets up format = "debezium"; add that attribute to the sink or remove the block.`)
		return
	}
	s.Debezium = d.decodeDebezium(block.Body, pipeline)
}

// checkCloudEventsMode refuses a config block's cloudevents_mode on a
// sink whose events are not CloudEvents: the plugin would never use it,
// and whoever set it expects CloudEvents.
func (d *decoder) checkCloudEventsMode(s *Sink) {
	if s.Format == FormatCloudEvents {
		return
	}
	attrs, _ := s.Config.JustAttributes()
	if attr, ok := attrs[cloudEventsModeSetting]; ok {
		d.errorf(attr.NameRange, "cloudevents_mode without the cloudevents format",
			`cloudevents_mode says how CloudEvents travel (structured or binary); this sink's format is %q. Add format = "cloudevents" to the sink, or remove cloudevents_mode.`, s.Format)
	}
}

func (d *decoder) decodeDebezium(body hcl.Body, pipeline string) Debezium {
	content, diags := body.Content(debeziumSchema)
	d.add(diags...)
	attrs := content.Attributes
	dz := Debezium{Name: pipeline, DecimalHandling: DecimalPrecise}
	if attr, ok := attrs["name"]; ok {
		var v string
		if d.decodeAttr(attr, &v) {
			if v == "" {
				d.errorf(attr.Expr.Range(), "Empty debezium name",
					"name is the logical server name in every event's source.name and schema names; remove it to use the pipeline's name.")
			} else {
				dz.Name = v
			}
		}
	}
	if attr, ok := attrs["schemas"]; ok {
		d.decodeAttr(attr, &dz.Schemas)
	}
	if attr, ok := attrs["decimal_handling_mode"]; ok {
		var v string
		if d.decodeAttr(attr, &v) {
			switch v {
			case DecimalPrecise, DecimalDouble, DecimalString:
				dz.DecimalHandling = v
			default:
				d.errorf(attr.Expr.Range(), "Invalid decimal_handling_mode",
					`decimal_handling_mode must be "precise" (Kafka Connect Decimal, the default), "double" or "string", got %q.`, v)
			}
		}
	}
	return dz
}
