package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/plugins/internal/servertest"
)

// Against a nats-server that requires TLS and verifies client
// certificates: the sink with the CA and a client certificate publishes,
// and an independent TLS client reads each event once; an untrusted
// server certificate, a missing client certificate or no tls fail Open
// (walcast stops at start), naming TLS and what to check.
func TestTLS(t *testing.T) {
	certs := servertest.WriteCerts(t)
	srv := startNATS(t, fmt.Sprintf("tls {\n cert_file: %q\n key_file: %q\n ca_file: %q\n verify: true\n}",
		certs.ServerCert, certs.ServerKey, certs.CA))
	s := openSink(t, srv, map[string]any{"tls": certs.ClientTLS()}, "public.items")
	batch := events(0x100, 5)
	deliver(t, s, pluginkit.Batch{Events: batch})
	assertStored(t, readStream(t, srv.reader(t, nats.Secure(certs.ClientConfig(t))), "WALCAST"), batch)

	for _, tc := range []struct {
		name string
		cfg  map[string]any
	}{
		{"server certificate not trusted", map[string]any{"tls": certs.ClientTLS("ca_file")}},
		{"no client certificate", map[string]any{"tls": certs.ClientTLS("cert_file", "key_file")}},
		{"no TLS", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := configureOpen(t, newSink(discardLogger()), srv.url(), tc.cfg, "public.items")
			if err == nil || !strings.Contains(err.Error(), "TLS with [nats://"+srv.Addr+"] failed; check tls") {
				t.Fatalf("Open = %v, want TLS named with what to check", err)
			}
		})
	}
}

// NKey authentication: the user's seed file opens, another user's seed
// is refused naming the file to check.
func TestNKeyAuthentication(t *testing.T) {
	seedFile := func(name string) (path, public string) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := kp.Seed()
		public, _ = kp.PublicKey()
		path = filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, seed, 0o600); err != nil {
			t.Fatal(err)
		}
		return path, public
	}
	good, public := seedFile("walcast.nk")
	other, _ := seedFile("other.nk")
	srv := startNATS(t, fmt.Sprintf("authorization { users = [ { nkey: %q } ] }", public))
	s := openSink(t, srv, map[string]any{"nkey_seed_file": good}, "public.items")
	batch := events(0x100, 3)
	deliver(t, s, pluginkit.Batch{Events: batch})
	_, err := configureOpen(t, newSink(discardLogger()), srv.url(), map[string]any{"nkey_seed_file": other}, "public.items")
	if err == nil || !strings.Contains(err.Error(), "NATS refused authentication (with nkey_seed_file "+other+"); check nkey_seed_file") {
		t.Fatalf("Open with another user's seed = %v, want the refusal naming the seed file", err)
	}
}
