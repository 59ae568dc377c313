package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/textproto"

	"github.com/walcast/walcast/pluginkit"
)

// Outbox events (docs/outbox.md) are what an application wrote in its
// outbox table, not changes: each goes in a POST of its own, to the URL's
// path joined with its route, whose body is the payload as it is and
// whose headers carry the event's headers as Walcast-Outbox-<Name>
// ("id" → Walcast-Outbox-Id, "type" → Walcast-Outbox-Type). The
// Standard Webhooks headers stay (webhook-id names the event, a
// signature when a secret is set). A batch mixing them with change
// events keeps its order: the change events between two outbox events
// go as one request per route, as they would alone.

// outboxHeaderPrefix starts the HTTP header of each event header.
const outboxHeaderPrefix = "Walcast-Outbox-"

// deliverOutbox delivers a batch holding outbox events, in order, and
// stops at the first request that fails: its events and every later one
// are reported failed with its error (never sent, so an aggregate's later
// event never overtakes it).
func (s *Sink) deliverOutbox(ctx context.Context, cfg settings, client *http.Client, events []pluginkit.Event) error {
	for i := 0; i < len(events); {
		j := i + 1
		var err error
		if len(events[i].Headers) > 0 {
			err = s.postOutbox(ctx, cfg, client, &events[i])
		} else {
			for j < len(events) && len(events[j].Headers) == 0 {
				j++
			}
			err = s.deliverGroups(ctx, cfg, client, events[i:j])
		}
		if err == nil {
			i = j
			continue
		}
		if i == 0 {
			return err
		}
		failed := make(map[int]error, len(events)-i)
		for k := i; k < len(events); k++ {
			failed[k] = err
		}
		return &pluginkit.BatchError{Failed: failed}
	}
	return nil
}

// postOutbox POSTs one outbox event.
func (s *Sink) postOutbox(ctx context.Context, cfg settings, client *http.Client, e *pluginkit.Event) error {
	groups, err := byRoute(cfg.url, []pluginkit.Event{*e})
	if err != nil {
		return err
	}
	r := request{target: groups[0].target, body: net.Buffers{e.Payload}, id: batchID([]pluginkit.Event{*e}),
		contentType: "text/plain; charset=utf-8", header: make(http.Header, len(e.Headers))}
	if json.Valid(e.Payload) {
		r.contentType = "application/json"
	}
	for k, v := range e.Headers {
		if !validHeaderValue(v) {
			return pluginkit.Permanent(fmt.Errorf("event %s: header %q has a control character, which HTTP cannot carry: %q", e.ID, k, v))
		}
		r.header.Set(textproto.CanonicalMIMEHeaderKey(outboxHeaderPrefix+k), v)
	}
	return s.post(ctx, cfg, client, r)
}

// validHeaderValue reports whether v can be an HTTP header's value as it
// is: no control character but tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
