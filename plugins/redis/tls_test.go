package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/walcast/walcast/pluginkit"
)

// Against a redis-server that speaks only TLS and wants a client
// certificate (tls-auth-clients, its default): the sink with the CA and a
// client certificate writes, and an independent TLS client reads each
// event once; an untrusted server certificate, a missing client
// certificate or no TLS at all fail Open (walcast stops at start), naming
// what to check.
func TestTLS(t *testing.T) {
	certs := writeCerts(t)
	srv := startRedisTLS(t, certs)
	s, _ := openSink(t, srv.addr, map[string]any{"tls": certs.clientTLS()})
	batch := events(0x100, 5)
	deliver(t, s, pluginkit.Batch{Events: batch})
	c := redis.NewClient(&redis.Options{Addr: srv.addr, Protocol: 2, DisableIdentity: true, TLSConfig: certs.tlsConfig(t)})
	t.Cleanup(func() { c.Close() })
	assertOnce(t, entries(t, c, itemsStream), batch)

	for _, tc := range []struct {
		name string
		cfg  map[string]any
		want string
	}{
		{"server certificate not trusted", map[string]any{"tls": certs.clientTLS("ca_file")}, "TLS with " + srv.addr + " failed; check tls (ca_file"},
		// Redis sends "certificate required" or, as often, closes the
		// connection without a word: either way the error names cert_file.
		// To a plain client it says nothing: the sink names tls.
		{"no client certificate", map[string]any{"tls": certs.clientTLS("cert_file", "key_file")}, "cert_file"},
		{"no TLS", nil, "closed the connection (a server that speaks only TLS does that to a client without tls)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := configureOpen(t, newSink(discardLogger()), srv.addr, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open = %v, want %q", err, tc.want)
			}
		})
	}
}

// startRedisTLS starts a redis-server listening only on a TLS port.
func startRedisTLS(t *testing.T, c testCerts) *redisServer {
	t.Helper()
	needRedis(t)
	s := &redisServer{t: t, addr: freeAddr(t), dir: t.TempDir()}
	_, port, _ := net.SplitHostPort(s.addr)
	s.args = []string{"--port", "0", "--tls-port", port, "--bind", "127.0.0.1", "--dir", s.dir, "--save", "",
		"--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning",
		"--tls-cert-file", c.ServerCert, "--tls-key-file", c.ServerKey, "--tls-ca-cert-file", c.CA}
	s.start()
	t.Cleanup(s.stop)
	return s
}

// testCerts are PEM files for a TLS test: a CA, a server certificate for
// 127.0.0.1 and a client certificate, both signed by the CA.
type testCerts struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

// writeCerts makes a fresh CA and its two certificates in a temporary
// directory.
func writeCerts(t *testing.T) testCerts {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "walcast test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) (certPath, keyPath string) {
		key := newKey()
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "PRIVATE KEY", keyDER)
	}
	c := testCerts{CA: write("ca.pem", "CERTIFICATE", caDER)}
	c.ServerCert, c.ServerKey = leaf(2, "server", x509.ExtKeyUsageServerAuth)
	c.ClientCert, c.ClientKey = leaf(3, "client", x509.ExtKeyUsageClientAuth)
	return c
}

// clientTLS is the map the sink's tls attribute takes; omit drops keys.
func (c testCerts) clientTLS(omit ...string) map[string]string {
	m := map[string]string{"ca_file": c.CA, "cert_file": c.ClientCert, "key_file": c.ClientKey}
	for _, k := range omit {
		delete(m, k)
	}
	return m
}

// tlsConfig is the test's own client TLS configuration.
func (c testCerts) tlsConfig(t *testing.T) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	b, err := os.ReadFile(c.CA)
	if err != nil || !pool.AppendCertsFromPEM(b) {
		t.Fatalf("read %s: %v", c.CA, err)
	}
	cert, err := tls.LoadX509KeyPair(c.ClientCert, c.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}
