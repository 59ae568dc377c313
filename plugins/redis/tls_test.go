package main

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/plugins/internal/servertest"
)

// Against a redis-server that speaks only TLS and wants a client
// certificate (tls-auth-clients, its default): the sink with the CA and a
// client certificate writes, and an independent TLS client reads each
// event once; an untrusted server certificate, a missing client
// certificate or no TLS at all fail Open (walcast stops at start), naming
// what to check.
func TestTLS(t *testing.T) {
	certs := servertest.WriteCerts(t)
	srv := startRedisTLS(t, certs)
	s, _ := openSink(t, srv.Addr, map[string]any{"tls": certs.ClientTLS()})
	batch := events(0x100, 5)
	deliver(t, s, pluginkit.Batch{Events: batch})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2, DisableIdentity: true, TLSConfig: certs.ClientConfig(t)})
	t.Cleanup(func() { c.Close() })
	assertOnce(t, entries(t, c, itemsStream), batch)

	for _, tc := range []struct {
		name string
		cfg  map[string]any
		want string
	}{
		{"server certificate not trusted", map[string]any{"tls": certs.ClientTLS("ca_file")}, "TLS with " + srv.Addr + " failed; check tls (ca_file"},
		// Redis sends "certificate required" or, as often, closes the
		// connection without a word: either way the error names cert_file.
		// To a plain client it says nothing: the sink names tls.
		{"no client certificate", map[string]any{"tls": certs.ClientTLS("cert_file", "key_file")}, "cert_file"},
		{"no TLS", nil, "closed the connection (a server that speaks only TLS does that to a client without tls)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := configureOpen(t, newSink(discardLogger()), srv.Addr, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open = %v, want %q", err, tc.want)
			}
		})
	}
}

// startRedisTLS starts a redis-server listening only on a TLS port.
func startRedisTLS(t *testing.T, c servertest.Certs) *redisServer {
	t.Helper()
	return runRedis(t, func(port string) []string {
		return []string{"--port", "0", "--tls-port", port,
			"--tls-cert-file", c.ServerCert, "--tls-key-file", c.ServerKey, "--tls-ca-cert-file", c.CA}
	})
}
