package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

// Refused credentials stop Open with what to check; the right ones work.
func TestAuthentication(t *testing.T) {
	users := startNATS(t, `authorization { users = [ { user: "walcast", password: "pw2" } ] }`)
	tokens := startNATS(t, `authorization { token: "t0ken" }`)
	for _, tc := range []struct {
		name string
		srv  *natsServer
		cfg  map[string]any
		want string // empty: Open succeeds
	}{
		{"no credentials", users, nil, "without credentials"},
		{"wrong password", users, map[string]any{"username": "walcast", "password": "nope"}, `as user "walcast"`},
		{"user and password", users, map[string]any{"username": "walcast", "password": "pw2"}, ""},
		{"wrong token", tokens, map[string]any{"token": "nope"}, "with token"},
		{"token", tokens, map[string]any{"token": "t0ken"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := configureOpen(t, newSink(discardLogger()), tc.srv.url(), tc.cfg)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "NATS refused authentication ("+tc.want+")") {
				t.Fatalf("Open = %v, want the refusal named (%s)", err, tc.want)
			}
			if strings.Contains(err.Error(), "nope") {
				t.Errorf("the error shows the credential: %v", err)
			}
		})
	}
}

// Servers that are down when the sink opens do not stop walcast: Open
// succeeds, Deliver fails retryably naming the servers while they are
// down, and once one is up the sink creates the stream and publishes.
func TestServerDownAtStart(t *testing.T) {
	srv := startNATS(t, "")
	srv.Stop()
	s := openSink(t, srv, nil, "public.items")
	batch := events(0x100, 3)
	_, err := s.Deliver(t.Context(), pluginkit.Batch{Events: batch})
	if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindRetryable || !strings.Contains(err.Error(), "nats://"+srv.Addr) {
		t.Fatalf("Deliver to servers that are down = %v (%s), want retryable naming them", err, kind)
	}
	srv.Start()
	deliverEventually(t, s, batch)
	assertStored(t, readStream(t, srv.reader(t), "WALCAST"), batch)
}

// A server killed and restarted mid-stream keeps what it acknowledged
// (file storage); the client reconnects and the stream is checked again,
// and a batch redelivered across the restart is stored once.
func TestServerRestartMidStream(t *testing.T) {
	srv := startNATS(t, "")
	s := openSink(t, srv, nil)
	a, b := events(0x100, 10), events(0x200, 10)
	deliver(t, s, pluginkit.Batch{Events: a})
	srv.Restart()
	deliverEventually(t, s, a)
	deliverEventually(t, s, b)
	assertStored(t, readStream(t, srv.reader(t), "WALCAST"), a, b)
}

// deliverEventually retries a retryable failure, as the host does, for
// up to 30 s.
func deliverEventually(t *testing.T, s *Sink, batch []pluginkit.Event) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, err := s.Deliver(ctx, pluginkit.Batch{Events: batch})
		cancel()
		if err == nil {
			return
		}
		if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindRetryable || time.Now().After(deadline) {
			t.Fatalf("Deliver: %v (%s)", err, kind)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
