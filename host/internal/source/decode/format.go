package decode

import (
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Formats a sink can choose besides walcast's own envelope (docs/formats.md).
const (
	FormatWalcast  = "walcast"
	FormatDebezium = "debezium"
	FormatSequin   = "sequin"
	// FormatCloudEvents is CloudEvents 1.0 in its JSON event format, the
	// envelope as data (cloudevents.go).
	FormatCloudEvents = "cloudevents"
)

// Format is one output format the decoder writes next to the envelope,
// once per event, for every sink that chose it: the encoding needs the
// column types the Relation message gives, which the envelope no longer
// carries (a numeric and a text column are both JSON strings there).
type Format struct {
	// Name is FormatDebezium, FormatSequin or FormatCloudEvents (the
	// envelope is always written and needs no Format); the options of
	// that format are set.
	Name        string
	Debezium    DebeziumOptions
	Sequin      SequinOptions
	CloudEvents CloudEventsOptions
}

// Decimal handling modes of the debezium format, as Debezium names them
// (decimal.handling.mode).
const (
	DecimalPrecise = "precise"
	DecimalDouble  = "double"
	DecimalString  = "string"
)

// DebeziumOptions are the settings of the debezium format.
type DebeziumOptions struct {
	// Name is the logical server name (Debezium's topic.prefix): the
	// source block's "name" and the prefix of every schema name.
	Name string
	// Database is the source database's name, source.db.
	Database string
	// Version goes in source.version.
	Version string
	// Schemas wraps key and value in {"schema":…,"payload":…}, as Kafka
	// Connect's JSON converter does with schemas.enable=true.
	Schemas bool
	// Decimal is DecimalPrecise (the default when empty), DecimalDouble
	// or DecimalString.
	Decimal string
}

// CheckFormats refuses formats the decoder cannot write, so that a typo in
// a caller fails where it is configured rather than as a wrong payload.
func CheckFormats(formats []Format) error {
	for i, f := range formats {
		switch f.Name {
		case FormatDebezium, FormatSequin:
		case FormatCloudEvents:
			if f.CloudEvents.Source == "" {
				return fmt.Errorf("format %d: cloudevents without a source", i)
			}
		default:
			return fmt.Errorf("format %d: unknown format %q (want %q, %q or %q)", i, f.Name, FormatDebezium, FormatSequin, FormatCloudEvents)
		}
		switch f.Debezium.Decimal {
		case "", DecimalPrecise, DecimalDouble, DecimalString:
		default:
			return fmt.Errorf("format %d: decimal handling mode %q: want %s, %s or %s", i, f.Debezium.Decimal, DecimalPrecise, DecimalDouble, DecimalString)
		}
	}
	return nil
}

// change is what one event is about, as the formats need it.
type rowChange struct {
	rel                *relation
	op                 cdc.Op
	newTuple, oldTuple []*pglogrepl.TupleDataColumn
	oldKind            uint8
	// keyChanged: an update whose key differs from the old tuple's.
	keyChanged bool
	// env is the envelope just written, for the formats built from it.
	env envParts
}

// encodeFormats writes the event in every format of the decoder's options,
// each in one allocation of its own.
func (d *Decoder) encodeFormats(c *rowChange) []change.Encoded {
	if len(d.opts.Formats) == 0 {
		return nil
	}
	out := make([]change.Encoded, len(d.opts.Formats))
	if c.rel.txLSN != d.commitLSN {
		c.rel.txLSN, c.rel.inTx = d.commitLSN, 0
	}
	c.rel.inTx++
	for i := range d.opts.Formats {
		switch f := &d.opts.Formats[i]; f.Name {
		case FormatSequin:
			out[i] = d.sequinEvent(&f.Sequin, c)
			continue
		case FormatCloudEvents:
			continue // built from the emitted envelope, in emit
		}
		enc := d.debezium(i, c.rel)
		b := d.fbuf[:0]
		var keyEnd, oldKeyEnd int
		b = enc.appendKey(b, d, c.rel, c.newTuple, c.oldTuple, c.op)
		keyEnd = len(b)
		if c.keyChanged {
			b = enc.appendKey(b, d, c.rel, c.oldTuple, nil, cdc.OpDelete)
		}
		oldKeyEnd = len(b)
		b = enc.appendValue(b, d, c)
		d.fbuf = b
		buf := make([]byte, len(b))
		copy(buf, b)
		out[i] = change.Encoded{Key: buf[:keyEnd:keyEnd], Payload: buf[oldKeyEnd:]}
		if c.keyChanged {
			out[i].OldKey = buf[keyEnd:oldKeyEnd:oldKeyEnd]
		}
	}
	return out
}

// sequinEvent is the event in the sequin format: its own payload, the
// envelope's key and old key.
func (d *Decoder) sequinEvent(o *SequinOptions, c *rowChange) change.Encoded {
	b := d.appendSequin(d.fbuf[:0], o, c)
	d.fbuf = b
	buf := make([]byte, len(c.env.key)+len(c.env.oldKey)+len(b))
	n := copy(buf, c.env.key)
	m := n + copy(buf[n:], c.env.oldKey)
	copy(buf[m:], b)
	e := change.Encoded{Key: buf[:n:n], Payload: buf[m:]}
	if c.env.oldKey != nil {
		e.OldKey = buf[n:m:m]
	}
	return e
}
