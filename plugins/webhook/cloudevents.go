package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// CloudEvents over HTTP (the CloudEvents HTTP protocol binding), for a
// sink with format = "cloudevents", whose events are CloudEvents in the
// JSON event format. cloudevents_mode picks the content mode:
//   - structured (default): one POST per event, the event as body,
//     Content-Type application/cloudevents+json; what every CloudEvents
//     receiver accepts;
//   - binary: one POST per event, each context attribute in a ce-*
//     header (percent-encoded as the binding says), datacontenttype as
//     Content-Type, the data (the envelope) as body;
//   - batch: one POST per batch, a JSON array of the events,
//     Content-Type application/cloudevents-batch+json.
//
// Each request keeps the Standard Webhooks headers (webhook-id names the
// request's events, a signature when a secret is set).
const (
	ceStructured = "structured"
	ceBinary     = "binary"
	ceBatch      = "batch"

	ceStructuredType = "application/cloudevents+json"
	ceBatchType      = "application/cloudevents-batch+json"
)

// deliverEach POSTs the events one by one, in order, and stops at the
// first that fails: the ones after it are reported failed with its
// error (never sent, so a row's later change never overtakes it).
func (s *Sink) deliverEach(ctx context.Context, cfg settings, client *http.Client, events []pluginkit.Event) error {
	for i := range events {
		r, err := ceRequest(cfg.ceMode, events[i:i+1])
		if err == nil {
			err = s.post(ctx, cfg, client, r)
		}
		if err == nil {
			continue
		}
		if i == 0 {
			return err
		}
		failed := make(map[int]error, len(events)-i)
		for j := i; j < len(events); j++ {
			failed[j] = err
		}
		return &pluginkit.BatchError{Failed: failed}
	}
	return nil
}

// ceRequest is the request of one event in structured or binary mode.
func ceRequest(mode string, one []pluginkit.Event) (request, error) {
	r := request{id: batchID(one), contentType: ceStructuredType, body: net.Buffers{one[0].Payload}}
	if mode != ceBinary {
		return r, nil
	}
	attrs, data, err := cdc.SplitCloudEvent(one[0].Payload)
	if err != nil {
		return request{}, pluginkit.Permanent(fmt.Errorf("event %s: %w", one[0].ID, err))
	}
	r.header, r.body = make(http.Header, len(attrs)), net.Buffers{data}
	for _, a := range attrs {
		if a.Name == "datacontenttype" {
			r.contentType = a.Value
			continue
		}
		r.header.Set("ce-"+a.Name, percentEncode(a.Value))
	}
	return r, nil
}

// percentEncode escapes what the HTTP binding says a ce-* header value
// must not carry as it is: space, double quote, percent, and every byte
// outside printable ASCII.
func percentEncode(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c <= ' ' || c == '"' || c == '%' || c >= 0x7f {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// encodeBatch lays out [e1,e2,...], the batched content mode's body.
func encodeBatch(events []pluginkit.Event) net.Buffers {
	return joinPayloads(events, []byte{'['}, []byte{']'})
}
