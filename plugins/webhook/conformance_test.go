package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/pluginkit/sinktest"
)

// TestConformance runs pluginkit/sinktest against the sink posting to an
// in-process receiver that records every event it acknowledged and can be
// made to hang or to fail.
func TestConformance(t *testing.T) {
	rcv := &receiver{}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)

	cfg, err := json.Marshal(map[string]any{
		"url":     srv.URL + "/hooks",
		"timeout": "10s",
		"headers": map[string]string{"Authorization": "Bearer conformance"},
		"secret":  "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	})
	if err != nil {
		t.Fatal(err)
	}
	sinktest.Run(t, sinktest.Config{
		NewBatch: func() pluginkit.BatchSink { return newSink(discardLogger()) },
		Config:   cfg,
		InvalidConfigs: []sinktest.InvalidConfig{
			{Name: "ftp url", Config: json.RawMessage(`{"url":"ftp://example.com/x"}`), Field: "url"},
			{Name: "url without host", Config: json.RawMessage(`{"url":"http:///x"}`), Field: "url"},
			{Name: "negative timeout", Config: json.RawMessage(`{"url":"http://example.com","timeout":"-1s"}`), Field: "timeout"},
			{Name: "header name with colon", Config: json.RawMessage(`{"url":"http://example.com","headers":{"X:Y":"1"}}`), Field: "headers"},
			{Name: "secret not base64", Config: json.RawMessage(`{"url":"http://example.com","secret":"whsec_not base64!"}`), Field: "secret"},
		},
		Received: rcv.received,
		Hang:     rcv.hang,
		Faults: []sinktest.Fault{
			{Name: "429 with Retry-After", Inject: rcv.fail(http.StatusTooManyRequests, "7"), Want: pluginkit.KindThrottled, RetryAfter: 7 * time.Second},
			{Name: "429 without Retry-After", Inject: rcv.fail(http.StatusTooManyRequests, ""), Want: pluginkit.KindThrottled, RetryAfter: defaultRetryAfter},
			{Name: "503", Inject: rcv.fail(http.StatusServiceUnavailable, ""), Want: pluginkit.KindRetryable},
			{Name: "400", Inject: rcv.fail(http.StatusBadRequest, ""), Want: pluginkit.KindRetryable},
		},
	})
}

// receiver is the destination: it records the events of every request it
// answers with 2xx, in arrival order.
type receiver struct {
	mu      sync.Mutex
	events  [][]byte
	status  int           // non-zero: answer every request with it
	retry   string        // Retry-After sent with status
	hanging chan struct{} // non-nil: hold requests until it is closed
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	status, retry, hanging := r.status, r.retry, r.hanging
	r.mu.Unlock()
	if hanging != nil {
		select {
		case <-hanging:
		case <-req.Context().Done(): // the sink gave up
			return
		}
	}
	if status != 0 {
		if retry != "" {
			w.Header().Set("Retry-After", retry)
		}
		http.Error(w, "injected failure", status)
		return
	}
	if req.Header.Get("Webhook-Signature") == "" || req.Header.Get("Authorization") != "Bearer conformance" {
		http.Error(w, "missing signature or authorization", http.StatusUnauthorized)
		return
	}
	var body struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.NewDecoder(req.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, e := range body.Events {
		r.events = append(r.events, e)
	}
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (r *receiver) received() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.events...)
}

func (r *receiver) hang() (release func()) {
	ch := make(chan struct{})
	r.mu.Lock()
	r.hanging = ch
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.hanging = nil
		r.mu.Unlock()
		close(ch)
	}
}

func (r *receiver) fail(status int, retryAfter string) func() (restore func()) {
	return func() func() {
		r.mu.Lock()
		r.status, r.retry = status, retryAfter
		r.mu.Unlock()
		return func() {
			r.mu.Lock()
			r.status, r.retry = 0, ""
			r.mu.Unlock()
		}
	}
}
