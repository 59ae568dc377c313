package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

// npmModules is where `make tools` installs the npm test clients.
const npmModules = "../../.tools/npm/node_modules"

// needVerifier returns node's path and the NODE_PATH under which the npm
// "standardwebhooks" package is found. In CI (CI=true) a missing one fails
// the test; by hand the test is skipped with what to run.
func needVerifier(t *testing.T) (node, nodePath string) {
	t.Helper()
	missing := func(what string) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s in CI: the Makefile's tools target installs it", what)
		}
		t.Skipf("%s: run `make tools` to check signatures with the Standard Webhooks reference verifier", what)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node not found")
	}
	dir, err := filepath.Abs(npmModules)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "standardwebhooks", "package.json")); err != nil {
		missing("npm package standardwebhooks not installed under .tools/npm")
	}
	return node, dir
}

// captured is one request as the receiver got it.
type captured struct {
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

// capture is an HTTP receiver that records every request and answers 204.
type capture struct {
	mu   sync.Mutex
	reqs []captured
}

func (c *capture) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h := map[string]string{}
	for k := range r.Header {
		h[strings.ToLower(k)] = r.Header.Get(k)
	}
	c.mu.Lock()
	c.reqs = append(c.reqs, captured{Headers: h, Body: string(body)})
	c.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// verdict is what the reference receiver (testdata/receiver.cjs) says about
// one request.
type verdict struct {
	WebhookID string   `json:"webhook_id"`
	Verified  bool     `json:"verified"`
	Duplicate bool     `json:"duplicate"`
	Events    []string `json:"events"`
	Error     string   `json:"error"`
}

// TestStandardWebhooksReceiver: a receiver built on the npm
// "standardwebhooks" reference verifier, deduplicating on webhook-id as the
// spec advises, gets batches cut the way the host cuts them after a
// failure: [0,2] split off first, then [0,1,2] re-cut, then [0,1,2] again
// (a redelivery). Every signature verifies, the redelivery is recognised,
// and no event is dropped: webhook-id names the exact body.
func TestStandardWebhooksReceiver(t *testing.T) {
	node, nodePath := needVerifier(t)
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	rcv := &capture{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	s := newSink(discardLogger())
	raw, _ := json.Marshal(map[string]any{"url": srv.URL, "secret": secret})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := s.Configure(ctx, pluginkit.Setup{Config: raw}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	ev := func(i uint64) pluginkit.Event {
		id := pluginkit.EventID{CommitLSN: 0x1A2B3C8, Index: i}
		return pluginkit.Event{ID: id, Schema: "public", Table: "t", Op: pluginkit.OpInsert, Key: fmt.Appendf(nil, `{"id":%d}`, i),
			Payload: fmt.Appendf(nil, `{"id":%q,"op":"insert"}`, id)}
	}
	batches := [][]pluginkit.Event{{ev(0), ev(2)}, {ev(0), ev(1), ev(2)}, {ev(0), ev(1), ev(2)}}
	for _, b := range batches {
		if _, err := s.Deliver(ctx, pluginkit.Batch{Events: b}); err != nil {
			t.Fatal(err)
		}
	}

	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, r := range rcv.reqs {
		if r.Headers["idempotency-key"] != r.Headers["webhook-id"] {
			t.Errorf("Idempotency-Key %q differs from webhook-id %q", r.Headers["idempotency-key"], r.Headers["webhook-id"])
		}
		enc.Encode(r)
	}
	cmd := exec.CommandContext(ctx, node, "testdata/receiver.cjs", secret)
	cmd.Env = append(os.Environ(), "NODE_PATH="+nodePath)
	cmd.Stdin = &in
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node receiver.cjs: %v\n%s", err, stderr.Bytes())
	}
	var verdicts []verdict
	accepted := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var v verdict
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("receiver line %q: %v", line, err)
		}
		t.Logf("standardwebhooks receiver saw: %s", line)
		if !v.Verified {
			t.Errorf("webhook-id %s: signature rejected by the reference verifier: %s", v.WebhookID, v.Error)
		}
		for _, id := range v.Events {
			accepted[id] = true
		}
		verdicts = append(verdicts, v)
	}
	if len(verdicts) != 3 {
		t.Fatalf("receiver answered %d requests, want 3", len(verdicts))
	}
	if verdicts[0].WebhookID == verdicts[1].WebhookID {
		t.Errorf("bodies [0,2] and [0,1,2] share webhook-id %s", verdicts[0].WebhookID)
	}
	if verdicts[1].WebhookID != verdicts[2].WebhookID || !verdicts[2].Duplicate {
		t.Errorf("the redelivered body got webhook-id %s, first sent as %s: want the same, recognised as a duplicate",
			verdicts[2].WebhookID, verdicts[1].WebhookID)
	}
	for _, e := range batches[1] {
		if !accepted[e.ID.String()] {
			t.Errorf("event %s was dropped by a receiver deduplicating on webhook-id", e.ID)
		}
	}
	if got := slices.Sorted(maps.Keys(accepted)); len(got) != 3 {
		t.Errorf("accepted events %v, want 3", got)
	}
}

// TestStatusCodes: the Standard Webhooks operational advice. 429 and 503
// with Retry-After throttle (the attempt does not count); 503 without it is
// a failed attempt; 410 Gone ends the sink (fatal), it is not retried.
func TestStatusCodes(t *testing.T) {
	tests := []struct {
		status     int
		retryAfter string
		kind       pluginkit.Kind
		after      time.Duration
	}{
		{http.StatusTooManyRequests, "7", pluginkit.KindThrottled, 7 * time.Second},
		{http.StatusServiceUnavailable, "12", pluginkit.KindThrottled, 12 * time.Second},
		{http.StatusServiceUnavailable, "", pluginkit.KindRetryable, 0},
		{http.StatusGone, "", pluginkit.KindFatal, 0},
		{http.StatusGone, "5", pluginkit.KindFatal, 0},
		{http.StatusInternalServerError, "5", pluginkit.KindRetryable, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d_retry_after_%q", tt.status, tt.retryAfter), func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.retryAfter != "" {
					w.Header().Set("Retry-After", tt.retryAfter)
				}
				http.Error(w, "no", tt.status)
			}))
			defer srv.Close()
			s := newSink(discardLogger())
			raw, _ := json.Marshal(map[string]any{"url": srv.URL})
			if err := s.Configure(t.Context(), pluginkit.Setup{Config: raw}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Open(t.Context()); err != nil {
				t.Fatal(err)
			}
			id := pluginkit.EventID{CommitLSN: 1}
			_, err := s.Deliver(t.Context(), pluginkit.Batch{Events: []pluginkit.Event{{ID: id, Payload: []byte(`{}`)}}})
			kind, after := pluginkit.KindOf(err)
			if kind != tt.kind || after != tt.after {
				t.Errorf("Deliver error %v: kind %s after %s, want %s after %s", err, kind, after, tt.kind, tt.after)
			}
			if tt.status == http.StatusGone && !strings.Contains(err.Error(), "410 Gone") {
				t.Errorf("error %q does not say the endpoint is gone", err)
			}
		})
	}
}
