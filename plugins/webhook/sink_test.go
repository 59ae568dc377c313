package main

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// The example from the Standard Webhooks specification's test suite.
func TestSignStandardWebhooksVector(t *testing.T) {
	key, err := signingKey("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	got := sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", net.Buffers{[]byte(`{"test": `), []byte(`2432232314}`)})
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Errorf("sign = %q, want %q", got, want)
	}
}

func TestSigningKeyRawSecret(t *testing.T) {
	key, err := signingKey("plain secret")
	if err != nil || string(key) != "plain secret" {
		t.Errorf("signingKey = %q, %v", key, err)
	}
	if _, err := signingKey("whsec_not base64!"); err == nil {
		t.Error("signingKey accepted invalid base64 after whsec_")
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 30 * time.Second},
		{"7", 7 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"0", 0},
		{"-5", 30 * time.Second},
		{"soon", 30 * time.Second},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
	}
	for _, tt := range tests {
		if got := retryAfter(tt.in, now); got != tt.want {
			t.Errorf("retryAfter(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestEncodeBodyConcatenatesPayloads(t *testing.T) {
	events := []pluginkit.Event{
		{Payload: []byte(`{"a":1}`)},
		{Payload: []byte(`{"b":[1,2]}`)},
	}
	body, _ := io.ReadAll(bodyReader(encodeBody(events)))
	if got, want := string(body), `{"events":[{"a":1},{"b":[1,2]}]}`; got != want {
		t.Errorf("encodeBody = %s, want %s", got, want)
	}
}

func TestConfigure(t *testing.T) {
	tests := []struct {
		name  string
		cfg   string
		field string // empty: valid
	}{
		{name: "minimal", cfg: `{"url":"https://example.com/hook"}`},
		{name: "full", cfg: `{"url":"http://127.0.0.1:8080/x","timeout":"5s","headers":{"Authorization":"Bearer t"},"secret":"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}`},
		{name: "missing url", cfg: `{}`, field: "url"},
		{name: "ftp url", cfg: `{"url":"ftp://example.com"}`, field: "url"},
		{name: "no host", cfg: `{"url":"http:///path"}`, field: "url"},
		{name: "unparseable url", cfg: `{"url":"http://[::1"}`, field: "url"},
		{name: "bad timeout", cfg: `{"url":"https://example.com","timeout":"soon"}`, field: "timeout"},
		{name: "negative timeout", cfg: `{"url":"https://example.com","timeout":"-1s"}`, field: "timeout"},
		{name: "bad header", cfg: `{"url":"https://example.com","headers":{"X Bad":"v"}}`, field: "headers"},
		{name: "bad secret", cfg: `{"url":"https://example.com","secret":"whsec_!!"}`, field: "secret"},
		{name: "wrong type", cfg: `{"url":42}`, field: "url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := newSink(discardLogger()).Configure(t.Context(), pluginkit.Setup{Config: json.RawMessage(tt.cfg)})
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Configure: %v", err)
				}
				return
			}
			var ce *pluginkit.ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.field {
				t.Fatalf("Configure = %v, want a ConfigError for %q", err, tt.field)
			}
		})
	}
}

// A 413 is the receiver's own size limit: permanent (parked at once when
// alone), never retried as transient.
func TestPayloadTooLargeIsPermanent(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
	})}
	go srv.Serve(l)
	defer srv.Close()
	s := newSink(discardLogger())
	if err := s.Configure(t.Context(), pluginkit.Setup{Config: json.RawMessage(`{"url":"http://` + l.Addr().String() + `/"}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer s.Close(t.Context())
	_, err = s.Deliver(t.Context(), pluginkit.Batch{Events: []pluginkit.Event{{ID: pluginkit.EventID{CommitLSN: 1}, Payload: []byte(`{"big":true}`)}}})
	if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindPermanent {
		t.Fatalf("Deliver against a 413 = %v (%s), want permanent", err, kind)
	}
}
