package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/plugins/internal/servertest"
)

// Against a broker that speaks only TLS and requires a client certificate
// of the test CA: the sink with the CA and a client certificate writes,
// and an independent TLS client reads each event once; without the CA,
// without the client certificate, or with TLS switched off
// (enabled = "false") Open fails.
func TestTLS(t *testing.T) {
	certs := servertest.WriteCerts(t)
	_, addr := broker(t, kfake.TLS(certs.ServerConfig(t)))
	s, _ := openSink(t, addr, map[string]any{"tls": certs.ClientTLS()})
	batch := events(0x100, 5)
	deliver(t, s, batch)
	assertOnce(t, read(t, addr, "walcast.public.items", kgo.ReadCommitted(), kgo.DialTLSConfig(certs.ClientConfig(t))), batch)

	off := certs.ClientTLS()
	off["enabled"] = "false"
	for _, tc := range []struct {
		name string
		tls  map[string]string
		want string // franz-go's and crypto/tls's words for it
	}{
		{"server certificate not trusted", certs.ClientTLS("ca_file"), "certificate signed by unknown authority"},
		{"no client certificate", certs.ClientTLS("cert_file", "key_file"), "certificate required"},
		{"TLS off", off, "is TLS missing?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, _ := json.Marshal(map[string]any{"brokers": []string{addr}, "tls": tc.tls})
			s := newSink(discardLogger())
			if err := s.Configure(t.Context(), pluginkit.Setup{Config: raw}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close(context.Background()) })
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			if _, err := s.Open(ctx); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open = %v, want %q", err, tc.want)
			}
		})
	}
}
