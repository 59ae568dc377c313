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
//	 "type":"com.walcast.public.orders.update","subject":"{\"id\":42}",
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
	// TypePrefix starts every event's type attribute:
	// <TypePrefix>.<schema>.<table>.<op> (CloudEventsTypePrefix when
	// empty).
	TypePrefix string
}

// CloudEventsTypePrefix is the type prefix of a cloudevents format that
// sets none.
const CloudEventsTypePrefix = "com.walcast"

// CloudEventsSource is the CloudEventsOptions.Source of a stream:
// "/walcast/<name>/<database>", each part percent-encoded, where name is
// the pipeline's (library mode: the slot's). The name makes source and
// id unique together even when two pipelines read one database.
func CloudEventsSource(name, database string) string {
	return "/walcast/" + url.PathEscape(name) + "/" + url.PathEscape(database)
}

// ceType appends the type attribute of ev (docs/formats.md):
// <prefix>.<schema>.<table>.<op> for every event of a table, a schema
// event and a resync marker included (their op says which), and
// <prefix>.message for an application message, which has no table.
func ceType(b []byte, prefix string, ev *cdc.Event) []byte {
	if prefix == "" {
		prefix = CloudEventsTypePrefix
	}
	b = append(b, prefix...)
	if ev.Schema != "" || ev.Table != "" {
		b = append(b, '.')
		b = append(b, ev.Schema...)
		b = append(b, '.')
		b = append(b, ev.Table...)
	}
	b = append(b, '.')
	return append(b, ev.Op...)
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
	b = append(b, `,"type":`...)
	d.scratch = ceType(d.scratch[:0], o.TypePrefix, ev)
	b = appendJSONString(b, d.scratch)
	if len(ev.Key) > 0 && string(ev.Key) != "null" {
		b = append(b, `,"subject":`...)
		b = appendJSONString(b, ev.Key)
	}
	if d.commitTime.IsZero() {
		// A non-transactional message: no commit, so no time, commit
		// LSN or xid (its envelope has them null).
		b = append(b, `,"datacontenttype":"application/json","data":`...)
	} else {
		b = append(b, `,"time":"`...)
		b = d.commitTime.AppendFormat(b, "2006-01-02T15:04:05.000000Z07:00")
		b = append(b, `","datacontenttype":"application/json","commitlsn":"`...)
		b = cdc.AppendLSN(b, ev.ID.CommitLSN)
		b = append(b, `","xid":"`...)
		b = strconv.AppendUint(b, uint64(d.xid), 10)
		b = append(b, `","data":`...)
	}
	b = append(b, ev.Payload...)
	b = append(b, '}')
	d.fbuf = b
	return append([]byte(nil), b...)
}

// ceSource appends the source attribute of an event of schema.table; an
// application message (no table) has base + "/messages".
func ceSource(b []byte, base, schema, table string) []byte {
	b = append(b, base...)
	if schema == "" && table == "" {
		return append(b, "/messages"...)
	}
	b = append(b, '/')
	b = append(b, url.PathEscape(schema)...)
	b = append(b, '/')
	return append(b, url.PathEscape(table)...)
}
