package main

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/walcast/walcast/pluginkit"
)

// In the one-event modes a batch is sent event by event, in order; the
// first event that fails stops the batch: it and every later event are
// reported failed, and nothing after it is sent (a row's later change
// never overtakes it). A cloudevents_mode out of the three is refused.
func TestCloudEventsStopAtFirstFailure(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ids []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		defer mu.Unlock()
		ids = append(ids, r.Header.Get("Ce-Id"))
		if len(ids) == 2 {
			http.Error(w, "down", http.StatusInternalServerError)
		}
	})}
	go srv.Serve(l)
	defer srv.Close()
	s := newSink(discardLogger())
	if err := s.Configure(t.Context(), pluginkit.Setup{Config: json.RawMessage(`{"url":"http://` + l.Addr().String() + `/","cloudevents_mode":"binary"}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer s.Close(t.Context())
	var events []pluginkit.Event
	for i := range 4 {
		id := pluginkit.EventID{CommitLSN: 1, Index: uint64(i)}
		events = append(events, pluginkit.Event{ID: id, Payload: []byte(`{"specversion":"1.0","id":"` + id.String() + `","source":"/s","type":"t","data":{}}`)})
	}
	_, err = s.Deliver(t.Context(), pluginkit.Batch{Events: events})
	var be *pluginkit.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 3 || be.Failed[0] != nil || be.Failed[1] == nil || be.Failed[3] == nil {
		t.Fatalf("Deliver = %v, want events 1, 2 and 3 failed", err)
	}
	if len(ids) != 2 || ids[0] != "0/1:0" || ids[1] != "0/1:1" {
		t.Errorf("requests for %v, want 0/1:0 then 0/1:1 and nothing after the failure", ids)
	}

	bad := newSink(discardLogger())
	err = bad.Configure(t.Context(), pluginkit.Setup{Config: json.RawMessage(`{"url":"http://127.0.0.1/","cloudevents_mode":"streamed"}`)})
	var ce *pluginkit.ConfigError
	if !errors.As(err, &ce) || ce.Field != "cloudevents_mode" {
		t.Errorf("cloudevents_mode streamed: %v", err)
	}
}
