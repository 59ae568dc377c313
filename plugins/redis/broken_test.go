package main

import (
	"strings"
	"testing"

	"github.com/walcast/walcast/pluginkit"
)

// A wrong password stops Open with what to check; the right one, for the
// default user (requirepass) and for an ACL user, works.
func TestAuthentication(t *testing.T) {
	srv := startRedis(t, "--requirepass", "s3cret", "--user", "walcast", "on", ">pw2", "~*", "+@all")
	for _, tc := range []struct {
		name string
		cfg  map[string]any
		ok   bool
		user string
	}{
		{"no password", nil, false, `"default"`},
		{"wrong password", map[string]any{"password": "nope"}, false, `"default"`},
		{"requirepass", map[string]any{"password": "s3cret"}, true, ""},
		{"wrong ACL password", map[string]any{"username": "walcast", "password": "s3cret"}, false, `"walcast"`},
		{"ACL user", map[string]any{"username": "walcast", "password": "pw2"}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := configureOpen(t, newSink(discardLogger()), srv.Addr, tc.cfg)
			if tc.ok {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "refused authentication as user "+tc.user) || !strings.Contains(err.Error(), "check username and password") {
				t.Fatalf("Open = %v, want the refused user named and what to check", err)
			}
			if strings.Contains(err.Error(), "nope") || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("the error shows a password: %v", err)
			}
		})
	}
}

// A server that is down when the sink opens does not stop walcast: Open
// succeeds, Deliver fails retryably naming the address until the server
// is up, then the sink claims, reads the checkpoint and writes.
func TestServerDownAtStart(t *testing.T) {
	srv := startRedis(t)
	srv.Stop()
	s, res := openSink(t, srv.Addr, nil)
	if !res.Checkpoint.IsZero() {
		t.Fatalf("checkpoint %s from a server that is down", res.Checkpoint)
	}
	batch := events(0x100, 3)
	_, err := s.Deliver(t.Context(), pluginkit.Batch{Events: batch})
	if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindRetryable || !strings.Contains(err.Error(), srv.Addr+" unreachable") {
		t.Fatalf("Deliver to a server that is down = %v (%s), want retryable naming %s", err, kind, srv.Addr)
	}
	srv.Start()
	deliver(t, s, pluginkit.Batch{Events: batch})
	assertOnce(t, entries(t, srv.client(t, ""), itemsStream), batch)
}

// A server killed and restarted mid-stream (appendfsync always) keeps
// what it acknowledged; the batch that met the dead server fails
// retryably, and its retry lands once.
func TestServerRestartMidStream(t *testing.T) {
	srv := startRedis(t)
	s, _ := openSink(t, srv.Addr, nil)
	a, b := events(0x100, 10), events(0x200, 10)
	deliver(t, s, pluginkit.Batch{Events: a})
	srv.Restart()
	if _, err := s.Deliver(t.Context(), pluginkit.Batch{Events: b}); err != nil {
		if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindRetryable {
			t.Fatalf("Deliver across a restart = %v (%s), want retryable", err, kind)
		}
		deliver(t, s, pluginkit.Batch{Events: b})
	}
	assertOnce(t, entries(t, srv.client(t, ""), itemsStream), a, b)
}

// A Redis Cluster node is refused at Open: a transaction there can only
// write the keys of one hash slot.
func TestClusterRefused(t *testing.T) {
	srv := startRedis(t, "--cluster-enabled", "yes")
	_, err := configureOpen(t, newSink(discardLogger()), srv.Addr, nil)
	if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindPermanent || !strings.Contains(err.Error(), "Redis Cluster") {
		t.Fatalf("Open on a cluster node = %v (%s), want permanent naming Redis Cluster", err, kind)
	}
}
