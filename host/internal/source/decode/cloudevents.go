package decode

import (
	"net/url"
	"strconv"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// The cloudevents format: a CloudEvents 1.0 event in the JSON event
// format (structured mode), with walcast's envelope as its data:
//
//	{"specversion":"1.0","id":"0/1A2B3C8:0","source":"/walcast/shop/shop/public/orders",
//	 "type":"com.walcast.change.update","subject":"{\"id\":42}",
//	 "time":"2026-11-30T10:00:00.123456Z","datacontenttype":"application/json",
//	 "commitlsn":"0/1A2B3C8","xid":"7412","data":{…the envelope…}}
//
// Every event has a CloudEvents shape, resync markers and schema events
// included (types of their own), so a cloudevents sink never receives
// anything else. It is built from the emitted envelope alone: the data
// is those bytes, the attributes are the event's id, table and
// transaction. The sinks that can carry CloudEvents in binary mode
// (webhook, kafka) move the attributes into headers and keep data as the
// body; they recognise the format by its first member, "specversion".

// CloudEventsOptions are the settings of the cloudevents format.
type CloudEventsOptions struct {
	// Source is the start of every event's source attribute, a URI
	// reference; the table's schema and name follow as two
	// percent-encoded path segments. It names the pipeline and the
	// database, so that source and id together are unique as the
	// specification requires (ids are unique within one pipeline).
	Source string
}

// CloudEventsSource is the CloudEventsOptions.Source of a stream:
// "/walcast/<name>/<database>", each part percent-encoded, where name is
// the pipeline's (library mode: the slot's). The name makes source and
// id unique together even when two pipelines read one database.
func CloudEventsSource(name, database string) string {
	return "/walcast/" + url.PathEscape(name) + "/" + url.PathEscape(database)
}

// CloudEvents types of walcast's events (docs/formats.md).
const (
	ceTypePrefix      = "com.walcast."
	ceTypeSchema      = ceTypePrefix + "schema"
	ceTypeResyncBegin = ceTypePrefix + "resync.begin"
	ceTypeResyncEnd   = ceTypePrefix + "resync.end"
	ceTypeDetach      = ceTypePrefix + "partition.detach"
	ceTypeChange      = ceTypePrefix + "change."
)

// ceType is the type attribute of an event of op.
func ceType(b []byte, op cdc.Op) []byte {
	switch op {
	case cdc.OpSchema:
		return append(b, ceTypeSchema...)
	case cdc.OpResyncBegin:
		return append(b, ceTypeResyncBegin...)
	case cdc.OpResyncEnd:
		return append(b, ceTypeResyncEnd...)
	case cdc.OpDetach:
		return append(b, ceTypeDetach...)
	}
	b = append(b, ceTypeChange...)
	return append(b, op...)
}

// cloudEvents writes ev in every cloudevents format of the decoder's
// options into formats. An event no other format has a shape for (a
// marker, a schema event: formats is nil) gets the envelope in the other
// formats' places, as the fan-out would have given it.
func (d *Decoder) cloudEvents(formats []change.Encoded, ev cdc.Event, oldKey []byte) []change.Encoded {
	if !d.cloudEventsUsed {
		return formats
	}
	if formats == nil {
		formats = make([]change.Encoded, len(d.opts.Formats))
		for i := range formats {
			formats[i] = change.Encoded{Key: ev.Key, OldKey: oldKey, Payload: ev.Payload}
		}
	}
	for i := range d.opts.Formats {
		if f := &d.opts.Formats[i]; f.Name == FormatCloudEvents {
			formats[i] = change.Encoded{Key: ev.Key, OldKey: oldKey, Payload: d.cloudEvent(&f.CloudEvents, &ev)}
		}
	}
	return formats
}

// cloudEvent encodes ev as one CloudEvent, in one allocation.
func (d *Decoder) cloudEvent(o *CloudEventsOptions, ev *cdc.Event) []byte {
	b := append(d.fbuf[:0], `{"specversion":"1.0","id":"`...)
	b = cdc.AppendLSN(b, ev.ID.CommitLSN)
	b = append(b, ':')
	b = strconv.AppendUint(b, ev.ID.Index, 10)
	b = append(b, `","source":`...)
	d.scratch = ceSource(d.scratch[:0], o.Source, ev.Schema, ev.Table)
	b = appendJSONString(b, d.scratch)
	b = append(b, `,"type":"`...)
	b = ceType(b, ev.Op)
	b = append(b, '"')
	if len(ev.Key) > 0 && string(ev.Key) != "null" {
		b = append(b, `,"subject":`...)
		b = appendJSONString(b, ev.Key)
	}
	b = append(b, `,"time":"`...)
	b = d.commitTime.AppendFormat(b, "2006-01-02T15:04:05.000000Z07:00")
	b = append(b, `","datacontenttype":"application/json","commitlsn":"`...)
	b = cdc.AppendLSN(b, ev.ID.CommitLSN)
	b = append(b, `","xid":"`...)
	b = strconv.AppendUint(b, uint64(d.xid), 10)
	b = append(b, `","data":`...)
	b = append(b, ev.Payload...)
	b = append(b, '}')
	d.fbuf = b
	return append([]byte(nil), b...)
}

// ceSource appends the source attribute of an event of schema.table.
func ceSource(b []byte, base, schema, table string) []byte {
	b = append(b, base...)
	b = append(b, '/')
	b = append(b, url.PathEscape(schema)...)
	b = append(b, '/')
	return append(b, url.PathEscape(table)...)
}
