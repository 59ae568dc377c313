package servertest

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
	"testing"
	"time"
)

// Certs are PEM files for a TLS test: a CA, a server certificate for
// 127.0.0.1 and a client certificate, both signed by the CA.
type Certs struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

// WriteCerts makes a fresh CA and its two certificates in a temporary
// directory of t.
func WriteCerts(t testing.TB) Certs {
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
	c := Certs{CA: write("ca.pem", "CERTIFICATE", caDER)}
	c.ServerCert, c.ServerKey = leaf(2, "server", x509.ExtKeyUsageServerAuth)
	c.ClientCert, c.ClientKey = leaf(3, "client", x509.ExtKeyUsageClientAuth)
	return c
}

// ClientTLS is the map a sink's tls attribute takes, trusting the CA and
// presenting the client certificate; omit drops keys.
func (c Certs) ClientTLS(omit ...string) map[string]string {
	m := map[string]string{"ca_file": c.CA, "cert_file": c.ClientCert, "key_file": c.ClientKey}
	for _, k := range omit {
		delete(m, k)
	}
	return m
}

// ClientConfig is the test's own client TLS configuration, independent of
// the sink's decoding: it trusts the CA and presents the client
// certificate.
func (c Certs) ClientConfig(t testing.TB) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(c.ClientCert, c.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: c.pool(t), Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}

// ServerConfig is a server TLS configuration with the server certificate
// that requires and verifies a client certificate signed by the CA.
func (c Certs) ServerConfig(t testing.TB) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(c.ServerCert, c.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert}, ClientCAs: c.pool(t),
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
	}
}

func (c Certs) pool(t testing.TB) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	b, err := os.ReadFile(c.CA)
	if err != nil || !pool.AppendCertsFromPEM(b) {
		t.Fatalf("read %s: %v", c.CA, err)
	}
	return pool
}
