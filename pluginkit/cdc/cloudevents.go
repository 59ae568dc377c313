package cdc

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
)

// An event of a sink with format = "cloudevents" is a CloudEvents 1.0
// event in the JSON event format (structured mode), walcast's envelope as
// its data. A sink whose transport has headers can send it in binary
// mode instead: the context attributes as headers (ce-* over HTTP, ce_*
// on Kafka), the data as the body. These two functions are what such a
// sink needs of the format.

// CloudEventAttribute is one context attribute of a CloudEvent, its value
// as the string the binary mode carries.
type CloudEventAttribute struct {
	Name, Value string
}

// cloudEventStart is how every event of the cloudevents format begins.
var cloudEventStart = []byte(`{"specversion":`)

// IsCloudEvent reports whether payload is an event of the cloudevents
// format (walcast writes "specversion" first; no other format does).
func IsCloudEvent(payload []byte) bool { return bytes.HasPrefix(payload, cloudEventStart) }

// SplitCloudEvent splits a CloudEvent in the JSON event format into its
// context attributes, in their order, and its data: the raw JSON of
// "data", or the bytes "data_base64" holds. The attribute datacontenttype
// is among the attributes; a binary mode carries it as its content type
// header.
func SplitCloudEvent(payload []byte) (attrs []CloudEventAttribute, data []byte, err error) {
	err = EachMember(payload, func(name, value []byte) error {
		switch string(name) {
		case "data":
			data = value
			return nil
		case "data_base64":
			var s string
			if err := json.Unmarshal(value, &s); err != nil {
				return fmt.Errorf("data_base64: %w", err)
			}
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return fmt.Errorf("data_base64: %w", err)
			}
			data = b
			return nil
		}
		v := string(value)
		if len(value) > 0 && value[0] == '"' {
			if err := json.Unmarshal(value, &v); err != nil {
				return fmt.Errorf("attribute %s: %w", name, err)
			}
		}
		attrs = append(attrs, CloudEventAttribute{Name: string(name), Value: v})
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read CloudEvent: %w", err)
	}
	return attrs, data, nil
}
