package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/walcast/walcast/pluginkit"
)

// batch returns three events of two tables: an insert, an update and a
// truncate (whose key is JSON null), with non-ASCII payloads.
func batch() []pluginkit.Event {
	return []pluginkit.Event{
		{ID: pluginkit.EventID{CommitLSN: 0x1A2B3C8, Index: 0}, Schema: "public", Table: "orders", Op: pluginkit.OpInsert,
			Key: []byte(`{"id":42}`), Payload: []byte(`{"id":"0/1A2B3C8:0","op":"insert","new":{"id":42,"note":"café ☕"}}`)},
		{ID: pluginkit.EventID{CommitLSN: 0x1A2B3C8, Index: 1}, Schema: "billing", Table: "invoices", Op: pluginkit.OpUpdate,
			Key: []byte(`{"id":7}`), Payload: []byte(`{"id":"0/1A2B3C8:1","op":"update","new":{"id":7}}`)},
		{ID: pluginkit.EventID{CommitLSN: 0x10000000, Index: 0}, Schema: "public", Table: "orders", Op: pluginkit.OpTruncate,
			Key: []byte(`null`), Payload: []byte(`{"id":"0/10000000:0","op":"truncate"}`)},
	}
}

// TestDeliverSendsEveryField checks each field of the request against the
// events, and that the receiver's duplicate count comes back, bounded by
// the batch.
func TestDeliverSendsEveryField(t *testing.T) {
	rcv := startReceiver(t)
	s := openSink(t, map[string]any{"address": rcv.addr})
	events := batch()

	rcv.dups = 1
	res, err := s.Deliver(t.Context(), pluginkit.Batch{Events: events})
	if err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	if res.Duplicates != 1 {
		t.Errorf("Duplicates = %d, want the receiver's 1", res.Duplicates)
	}
	reqs := rcv.requests()
	if len(reqs) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(reqs))
	}
	req := reqs[0]
	if req.GetPipeline() != "shop" || req.GetSink() != "orders" {
		t.Errorf("pipeline, sink = %q, %q; want the identity's shop, orders", req.GetPipeline(), req.GetSink())
	}
	if len(req.GetEvents()) != len(events) {
		t.Fatalf("request has %d events, want %d", len(req.GetEvents()), len(events))
	}
	wantIDs := []string{"0/1A2B3C8:0", "0/1A2B3C8:1", "0/10000000:0"}
	for i, got := range req.GetEvents() {
		want := events[i]
		if got.GetId() != wantIDs[i] || got.GetSchema() != want.Schema || got.GetTable() != want.Table || got.GetOp() != string(want.Op) {
			t.Errorf("event %d = %s %s.%s %s, want %s %s.%s %s", i,
				got.GetId(), got.GetSchema(), got.GetTable(), got.GetOp(), wantIDs[i], want.Schema, want.Table, want.Op)
		}
		if !bytes.Equal(got.GetKey(), want.Key) || !bytes.Equal(got.GetPayload(), want.Payload) {
			t.Errorf("event %d: key %s payload %s, want key %s payload %s", i, got.GetKey(), got.GetPayload(), want.Key, want.Payload)
		}
	}

	// A receiver that over-reports cannot make the host count more
	// duplicates than the batch holds.
	rcv.mu.Lock()
	rcv.dups = 99
	rcv.mu.Unlock()
	if res, err := s.Deliver(t.Context(), pluginkit.Batch{Events: events}); err != nil || res.Duplicates != len(events) {
		t.Errorf("Deliver with 99 duplicates reported = %+v, %v; want %d", res, err, len(events))
	}
}

// TestStatusCodes checks the kind every status code the receiver can
// answer with is given, against a real server, and that the error says
// what was being done and what the receiver said.
func TestStatusCodes(t *testing.T) {
	rcv := startReceiver(t)
	s := openSink(t, map[string]any{"address": rcv.addr})

	kinds := map[codes.Code]pluginkit.Kind{codes.InvalidArgument: pluginkit.KindPermanent, codes.FailedPrecondition: pluginkit.KindPermanent,
		codes.OutOfRange: pluginkit.KindPermanent, codes.Unimplemented: pluginkit.KindFatal}
	for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
		if c == codes.ResourceExhausted {
			continue // below
		}
		want, ok := kinds[c]
		if !ok {
			want = pluginkit.KindRetryable
		}
		t.Run(c.String(), func(t *testing.T) {
			expectKind(t, s, rcv, status.New(c, "told to fail"), want, 0)
		})
	}
	t.Run("ResourceExhausted/RetryInfo", func(t *testing.T) {
		expectKind(t, s, rcv, withRetryInfo(t, 3*time.Second), pluginkit.KindThrottled, 3*time.Second)
	})
	t.Run("ResourceExhausted/NoRetryInfo", func(t *testing.T) {
		expectKind(t, s, rcv, status.New(codes.ResourceExhausted, "slow down"), pluginkit.KindThrottled, 30*time.Second)
	})
	t.Run("ResourceExhausted/NegativeRetryInfo", func(t *testing.T) {
		expectKind(t, s, rcv, withRetryInfo(t, -time.Second), pluginkit.KindThrottled, 0)
	})
	// Java's wording of an oversized message; Go's is tested for real by
	// TestOversizedBatchIsPermanent.
	t.Run("ResourceExhausted/JavaMessageTooLarge", func(t *testing.T) {
		expectKind(t, s, rcv, status.New(codes.ResourceExhausted, "gRPC message exceeds maximum size 4194304: 5000000"), pluginkit.KindPermanent, 0)
	})
}

// expectKind makes the receiver answer st and checks the kind and pause of
// Deliver's error.
func expectKind(t *testing.T, s *Sink, rcv *testReceiver, st *status.Status, want pluginkit.Kind, after time.Duration) {
	t.Helper()
	defer rcv.failWith(st.Err())()
	_, err := s.Deliver(t.Context(), pluginkit.Batch{Events: batch()})
	if err == nil {
		t.Fatal("Deliver succeeded while the receiver fails")
	}
	kind, gotAfter := pluginkit.KindOf(err)
	if kind != want || (want == pluginkit.KindThrottled && gotAfter != after) {
		t.Errorf("Deliver error %q is %s (pause %s), want %s (pause %s)", err, kind, gotAfter, want, after)
	}
	if what := "deliver 3 events to " + rcv.addr + ": "; !strings.Contains(err.Error(), what) {
		t.Errorf("Deliver error %q does not say what was being done (%q)", err, what)
	}
	if !strings.Contains(err.Error(), st.Message()) {
		t.Errorf("Deliver error %q lacks the receiver's message %q", err, st.Message())
	}
}

// TestOversizedBatchIsPermanent: a receiver that keeps gRPC's default
// size limit refuses a big batch with RESOURCE_EXHAUSTED. Throttling would
// resend the same batch forever; permanent makes the host split it.
func TestOversizedBatchIsPermanent(t *testing.T) {
	rcv := startReceiver(t, grpc.MaxRecvMsgSize(1024))
	s := openSink(t, map[string]any{"address": rcv.addr})
	events := batch()
	events[0].Payload = []byte(`{"pad":"` + strings.Repeat("x", 2048) + `"}`)
	_, err := s.Deliver(t.Context(), pluginkit.Batch{Events: events})
	if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindPermanent {
		t.Fatalf("Deliver of a batch over the receiver's limit = %v (%s), want a permanent error", err, kind)
	}
	if !strings.Contains(err.Error(), "maximum receive message size") {
		t.Errorf("error %q does not say how to fix it", err)
	}
	// The small events on their own go through.
	if _, err := s.Deliver(t.Context(), pluginkit.Batch{Events: batch()[1:]}); err != nil {
		t.Fatalf("Deliver of small events after the refusal: %v", err)
	}
}

// TestRequestOverLimitIsNotSent: a request larger than the sink sends is
// refused before it is sent, permanently so that the host splits it.
func TestRequestOverLimitIsNotSent(t *testing.T) {
	rcv := startReceiver(t)
	s := openSink(t, map[string]any{"address": rcv.addr})
	half := bytes.Repeat([]byte{'x'}, maxRequestBytes/2+1) // two events share it
	events := batch()[:2]
	events[0].Payload, events[1].Payload = half, half
	_, err := s.Deliver(t.Context(), pluginkit.Batch{Events: events})
	if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindPermanent {
		t.Fatalf("Deliver of a request over %d bytes = %v (%s), want a permanent error", maxRequestBytes, err, kind)
	}
	if n := rcv.callCount(); n != 0 {
		t.Errorf("the receiver got %d calls, want none", n)
	}
}

// TestTimeout: the configured timeout ends a call to a receiver that does
// not answer, before the host's own deadline (generous here, so that what
// ends the call can only be the timeout: the host's context is still live
// when Deliver returns), and the error is retryable. The time is logged.
func TestTimeout(t *testing.T) {
	rcv := startReceiver(t)
	s := openSink(t, map[string]any{"address": rcv.addr, "timeout": "200ms"})
	defer rcv.hang()()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // the host's deliver_timeout
	defer cancel()
	start := time.Now()
	_, err := s.Deliver(ctx, pluginkit.Batch{Events: batch()})
	elapsed := time.Since(start)
	if kind, _ := pluginkit.KindOf(err); err == nil || kind != pluginkit.KindRetryable {
		t.Fatalf("Deliver to a hanging receiver = %v (%s), want a retryable error", err, kind)
	}
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("error %q is not the deadline", err)
	}
	if ctx.Err() != nil {
		t.Errorf("Deliver returned after %s, at the host's deadline: the 200ms timeout did not end the call", elapsed)
	}
	if elapsed < 200*time.Millisecond {
		t.Errorf("Deliver returned after %s, before the 200ms timeout", elapsed)
	}
	t.Logf("the 200ms timeout ended the call after %s", elapsed.Round(time.Millisecond))
}

// TestReceiverDownAtOpen: Open does not need the receiver, deliveries fail
// retryably while it is down, and succeed again once it is back on the
// same address, within the capped reconnect backoff.
func TestReceiverDownAtOpen(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	s := openSink(t, map[string]any{"address": addr})
	_, err = s.Deliver(t.Context(), pluginkit.Batch{Events: batch()})
	if kind, _ := pluginkit.KindOf(err); err == nil || kind != pluginkit.KindRetryable {
		t.Fatalf("Deliver with the receiver down = %v (%s), want a retryable error", err, kind)
	}

	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err) // the port was taken meanwhile
	}
	rcv := &testReceiver{addr: addr}
	serve(t, rcv, l)
	wait := reconnectBackoff.MaxDelay + 5*time.Second
	deadline := time.Now().Add(wait)
	for {
		_, err := s.Deliver(t.Context(), pluginkit.Batch{Events: batch()})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Deliver still fails %s after the receiver came back: %v", wait, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := len(rcv.received()); got != 3 {
		t.Errorf("receiver got %d events, want 3", got)
	}
}

// TestToken: the token arrives as "authorization: Bearer <token>" over
// TLS and, when insecure_token allows it, over plaintext.
func TestToken(t *testing.T) {
	t.Run("TLS", func(t *testing.T) {
		p := newPKI(t)
		rcv := startReceiver(t, p.serverTLS(false))
		rcv.token = "s3cret"
		s := openSink(t, map[string]any{"address": rcv.addr, "tls": true, "ca_file": p.caFile, "server_name": serverName, "token": "s3cret"})
		if _, err := s.Deliver(t.Context(), pluginkit.Batch{Events: batch()}); err != nil {
			t.Fatalf("Deliver: %v", err)
		}
		if md, _ := rcv.lastCall(); strings.Join(md.Get("authorization"), ",") != "Bearer s3cret" {
			t.Errorf("authorization metadata = %q, want one \"Bearer s3cret\"", md.Get("authorization"))
		}
	})
	t.Run("PlaintextAllowed", func(t *testing.T) {
		rcv := startReceiver(t)
		rcv.token = "s3cret"
		s := openSink(t, map[string]any{"address": rcv.addr, "token": "s3cret", "insecure_token": true})
		if _, err := s.Deliver(t.Context(), pluginkit.Batch{Events: batch()}); err != nil {
			t.Fatalf("Deliver: %v", err)
		}
	})
	t.Run("WrongToken", func(t *testing.T) {
		rcv := startReceiver(t)
		rcv.token = "s3cret"
		s := openSink(t, map[string]any{"address": rcv.addr, "token": "guess", "insecure_token": true})
		_, err := s.Deliver(t.Context(), pluginkit.Batch{Events: batch()})
		if kind, _ := pluginkit.KindOf(err); err == nil || kind != pluginkit.KindRetryable {
			t.Fatalf("Deliver with a wrong token = %v (%s), want retryable UNAUTHENTICATED", err, kind)
		}
		if got := len(rcv.received()); got != 0 {
			t.Errorf("receiver accepted %d events", got)
		}
	})
	t.Run("NeverInClear", func(t *testing.T) {
		// Configure refuses a token without tls; behind that check, the
		// token's credentials make gRPC refuse a plaintext connection.
		conn, err := grpc.NewClient("127.0.0.1:1", dialOptions(settings{address: "127.0.0.1:1", token: "s3cret"})...)
		if err == nil {
			conn.Close()
			t.Fatal("gRPC accepted a plaintext connection for a token that requires TLS")
		}
	})
}

// TestTLS: the receiver's certificate is verified against ca_file and
// server_name, and nothing is delivered when verification fails.
func TestTLS(t *testing.T) {
	p := newPKI(t)
	rcv := startReceiver(t, p.serverTLS(false))
	tests := []struct {
		name string
		cfg  map[string]any
		ok   bool
	}{
		{"verified", map[string]any{"tls": true, "ca_file": p.caFile, "server_name": serverName}, true},
		// The certificate names receiver.test, not 127.0.0.1.
		{"name mismatch", map[string]any{"tls": true, "ca_file": p.caFile}, false},
		{"other CA", map[string]any{"tls": true, "ca_file": newPKI(t).caFile, "server_name": serverName}, false},
		// Not InsecureSkipVerify: the test CA is not a system root.
		{"system roots", map[string]any{"tls": true, "server_name": serverName}, false},
		{"plaintext to a TLS receiver", map[string]any{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg["address"] = rcv.addr
			s := openSink(t, tt.cfg)
			before := len(rcv.received())
			_, err := s.Deliver(t.Context(), pluginkit.Batch{Events: batch()})
			if tt.ok {
				if err != nil {
					t.Fatalf("Deliver: %v", err)
				}
				return
			}
			if kind, _ := pluginkit.KindOf(err); err == nil || kind != pluginkit.KindRetryable {
				t.Fatalf("Deliver = %v (%s), want a retryable failure", err, kind)
			}
			if got := len(rcv.received()); got != before {
				t.Errorf("receiver accepted %d events over a connection that should have failed", got-before)
			}
		})
	}
}

// TestMutualTLS: a receiver that requires client certificates accepts the
// sink's, sees who it is, and refuses a sink without one.
func TestMutualTLS(t *testing.T) {
	p := newPKI(t)
	rcv := startReceiver(t, p.serverTLS(true))
	base := map[string]any{"address": rcv.addr, "tls": true, "ca_file": p.caFile, "server_name": serverName}

	t.Run("WithCertificate", func(t *testing.T) {
		cfg := map[string]any{"cert_file": p.clientCertFile, "key_file": p.clientKeyFile}
		for k, v := range base {
			cfg[k] = v
		}
		s := openSink(t, cfg)
		if _, err := s.Deliver(t.Context(), pluginkit.Batch{Events: batch()}); err != nil {
			t.Fatalf("Deliver: %v", err)
		}
		_, pr := rcv.lastCall()
		info, ok := pr.AuthInfo.(credentials.TLSInfo)
		if !ok || len(info.State.VerifiedChains) == 0 || info.State.VerifiedChains[0][0].Subject.CommonName != "walcast-client" {
			t.Fatalf("receiver did not verify the client certificate: %+v", pr.AuthInfo)
		}
	})
	t.Run("WithoutCertificate", func(t *testing.T) {
		s := openSink(t, base)
		before := len(rcv.received())
		_, err := s.Deliver(t.Context(), pluginkit.Batch{Events: batch()})
		if kind, _ := pluginkit.KindOf(err); err == nil || kind != pluginkit.KindRetryable {
			t.Fatalf("Deliver without a client certificate = %v (%s), want a retryable failure", err, kind)
		}
		if got := len(rcv.received()); got != before {
			t.Errorf("receiver accepted %d events from a client without a certificate", got-before)
		}
	})
}

// TestConfigure checks that each bad attribute is reported as a
// ConfigError naming it, so the host points at the right HCL line.
func TestConfigure(t *testing.T) {
	p := newPKI(t)
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	otherKey := newPKI(t).clientKeyFile
	tlsOn := func(kv ...any) map[string]any {
		m := map[string]any{"address": "receiver.example:443", "tls": true}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name  string
		cfg   any
		field string // empty: valid
	}{
		{name: "minimal", cfg: map[string]any{"address": "localhost:50051"}},
		{name: "ipv6", cfg: map[string]any{"address": "[::1]:50051"}},
		{name: "full", cfg: tlsOn("ca_file", p.caFile, "cert_file", p.clientCertFile, "key_file", p.clientKeyFile,
			"server_name", serverName, "token", "t0k-en.x", "timeout", "5s")},
		{name: "token in clear allowed", cfg: map[string]any{"address": "localhost:50051", "token": "t", "insecure_token": true}},
		{name: "missing address", cfg: map[string]any{}, field: "address"},
		{name: "address without port", cfg: map[string]any{"address": "localhost"}, field: "address"},
		{name: "address with empty port", cfg: map[string]any{"address": "localhost:"}, field: "address"},
		{name: "address without host", cfg: map[string]any{"address": ":50051"}, field: "address"},
		{name: "address with named port", cfg: map[string]any{"address": "localhost:grpc"}, field: "address"},
		{name: "address with port 0", cfg: map[string]any{"address": "localhost:0"}, field: "address"},
		{name: "url instead of address", cfg: map[string]any{"address": "https://receiver.example:443"}, field: "address"},
		{name: "tls not a bool", cfg: map[string]any{"address": "localhost:50051", "tls": "yes"}, field: "tls"},
		{name: "ca_file without tls", cfg: map[string]any{"address": "localhost:50051", "ca_file": p.caFile}, field: "ca_file"},
		{name: "cert_file without tls", cfg: map[string]any{"address": "localhost:50051", "cert_file": p.clientCertFile, "key_file": p.clientKeyFile}, field: "cert_file"},
		{name: "server_name without tls", cfg: map[string]any{"address": "localhost:50051", "server_name": "x"}, field: "server_name"},
		{name: "missing ca_file", cfg: tlsOn("ca_file", filepath.Join(dir, "nope.pem")), field: "ca_file"},
		{name: "ca_file not PEM", cfg: tlsOn("ca_file", notPEM), field: "ca_file"},
		{name: "cert without key", cfg: tlsOn("cert_file", p.clientCertFile), field: "key_file"},
		{name: "key without cert", cfg: tlsOn("key_file", p.clientKeyFile), field: "cert_file"},
		{name: "missing cert_file", cfg: tlsOn("cert_file", filepath.Join(dir, "nope.pem"), "key_file", p.clientKeyFile), field: "cert_file"},
		{name: "cert_file not a certificate", cfg: tlsOn("cert_file", p.clientKeyFile, "key_file", p.clientKeyFile), field: "cert_file"},
		{name: "missing key_file", cfg: tlsOn("cert_file", p.clientCertFile, "key_file", filepath.Join(dir, "nope.pem")), field: "key_file"},
		{name: "key of another certificate", cfg: tlsOn("cert_file", p.clientCertFile, "key_file", otherKey), field: "key_file"},
		{name: "token without tls", cfg: map[string]any{"address": "localhost:50051", "token": "t"}, field: "token"},
		{name: "token with a newline", cfg: tlsOn("token", "t\n"), field: "token"},
		{name: "token with a space", cfg: tlsOn("token", "Bearer t"), field: "token"},
		{name: "insecure_token not a bool", cfg: map[string]any{"address": "localhost:50051", "insecure_token": "yes"}, field: "insecure_token"},
		{name: "unknown attribute", cfg: map[string]any{"address": "localhost:50051", "url": "http://x"}, field: "url"},
		{name: "bad timeout", cfg: map[string]any{"address": "localhost:50051", "timeout": "soon"}, field: "timeout"},
		{name: "zero timeout", cfg: map[string]any{"address": "localhost:50051", "timeout": "0s"}, field: "timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := newSink(discardLogger()).Configure(t.Context(), pluginkit.Setup{Config: mustJSON(t, tt.cfg)})
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Configure: %v", err)
				}
				return
			}
			var ce *pluginkit.ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.field || ce.Msg == "" {
				t.Fatalf("Configure = %v, want a ConfigError for %q", err, tt.field)
			}
		})
	}
}

// TestConfigureDoesNotLogToken: the configured line says whether a token
// is set, never the token.
func TestConfigureDoesNotLogToken(t *testing.T) {
	var buf bytes.Buffer
	s := newSink(slog.New(slog.NewTextHandler(&buf, nil)))
	cfg := json.RawMessage(`{"address":"localhost:50051","token":"very-secret","insecure_token":true}`)
	if err := s.Configure(t.Context(), pluginkit.Setup{Config: cfg}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "very-secret") {
		t.Errorf("the log shows the token: %s", buf.String())
	}
}
