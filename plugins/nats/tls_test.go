package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/walcast/walcast/pluginkit"
)

// Against a nats-server that requires TLS and verifies client
// certificates: the sink with the CA and a client certificate publishes,
// and an independent TLS client reads each event once; an untrusted
// server certificate, a missing client certificate or no tls fail Open
// (walcast stops at start), naming TLS and what to check.
func TestTLS(t *testing.T) {
	certs := writeCerts(t)
	srv := startNATS(t, fmt.Sprintf("tls {\n cert_file: %q\n key_file: %q\n ca_file: %q\n verify: true\n}",
		certs.ServerCert, certs.ServerKey, certs.CA))
	s := openSink(t, srv, map[string]any{"tls": certs.clientTLS()}, "public.items")
	batch := events(0x100, 5)
	deliver(t, s, pluginkit.Batch{Events: batch})
	assertStored(t, readStream(t, srv.reader(t, nats.Secure(certs.tlsConfig(t))), "WALCAST"), batch)

	for _, tc := range []struct {
		name string
		cfg  map[string]any
	}{
		{"server certificate not trusted", map[string]any{"tls": certs.clientTLS("ca_file")}},
		{"no client certificate", map[string]any{"tls": certs.clientTLS("cert_file", "key_file")}},
		{"no TLS", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := configureOpen(t, newSink(discardLogger()), srv.url(), tc.cfg, "public.items")
			if err == nil || !strings.Contains(err.Error(), "TLS with [nats://"+srv.addr+"] failed; check tls") {
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
