package main

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// CloudEvents on Kafka (the CloudEvents Kafka protocol binding), for a
// sink with format = "cloudevents": one record per event, key = the row
// key as for every format, and
//   - structured mode (default): value = the event in the JSON event
//     format, header content-type application/cloudevents+json;
//   - binary mode: value = the event's data (the envelope), each context
//     attribute in a ce_<name> header, datacontenttype as content-type.
//
// Every record of the topic is then a CloudEvent: no tombstone follows a
// delete and an update that changes the key is one record (the binding
// has no record without a value); the walcast-* headers stay.

const ceContentType = "content-type"

func parseCEMode(st *settings, mode string) error {
	switch mode {
	case "", "structured":
	case "binary":
		st.ceBinary = true
	default:
		return &pluginkit.ConfigError{Field: "cloudevents_mode", Msg: fmt.Sprintf(`must be "structured" or "binary", not %q`, mode)}
	}
	return nil
}

// cloudEventRecord is the record of an event in the cloudevents format.
// An event that cannot be split (never written by walcast) goes as it is,
// in structured mode.
func (s *Sink) cloudEventRecord(topic string, key []byte, e *pluginkit.Event, headers []kgo.RecordHeader) *kgo.Record {
	r := &kgo.Record{Topic: topic, Key: key, Value: e.Payload, Headers: headers}
	if s.cfg.ceBinary {
		if attrs, data, err := cdc.SplitCloudEvent(e.Payload); err == nil {
			r.Value = data
			for _, a := range attrs {
				name := "ce_" + a.Name
				if a.Name == "datacontenttype" {
					name = ceContentType
				}
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: name, Value: []byte(a.Value)})
			}
			return r
		}
	}
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: ceContentType, Value: []byte("application/cloudevents+json")})
	return r
}
