package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
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

	"github.com/walcast/walcast/pluginkit"
)

// The broker also listens with TLS (amqps), with a certificate of a CA
// made here, so that the sink's tls options meet a real TLS handshake.

// writeTLSFiles makes a CA and a server certificate for 127.0.0.1 in dir
// (ca.pem, server.pem, server-key.pem) and returns the config lines of a
// TLS listener on port using them.
func writeTLSFiles(dir string, port int) (string, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "walcast test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	srv := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", err
	}
	for name, block := range map[string]*pem.Block{
		"ca.pem":         {Type: "CERTIFICATE", Bytes: caDER},
		"server.pem":     {Type: "CERTIFICATE", Bytes: srvDER},
		"server-key.pem": {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o644); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf(`listeners.ssl.default = 127.0.0.1:%d
ssl_options.cacertfile = %s
ssl_options.certfile = %s
ssl_options.keyfile = %s
ssl_options.verify = verify_none
ssl_options.fail_if_no_peer_cert = false
`, port, filepath.Join(dir, "ca.pem"), filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")), nil
}

// TestTLS publishes over amqps with the test CA in tls.ca_file, and checks
// that without it the certificate is refused at Open, naming the cause.
func TestTLS(t *testing.T) {
	c := consume(t, "tls")
	url := fmt.Sprintf("amqps://guest:guest@127.0.0.1:%d/", rabbit.tlsPort)
	s := open(t, map[string]any{"url": url, "exchange": "tls", "tls": map[string]string{"ca_file": filepath.Join(rabbit.dir, "ca.pem")}})
	ev := event("0/16B3750:0", "public", "orders", `{"over":"tls"}`)
	if _, err := s.Deliver(ctx(t), pluginkit.Batch{Events: []pluginkit.Event{ev}}); err != nil {
		t.Fatal(err)
	}
	if d := waitDeliveries(t, c, 1)[0]; string(d.Body) != `{"over":"tls"}` {
		t.Fatalf("over TLS: %s", d.Body)
	}
	untrusted := New()
	if err := untrusted.Configure(ctx(t), pluginkit.Setup{Config: cfgJSON(t, map[string]any{"url": url, "exchange": "tls"})}); err != nil {
		t.Fatal(err)
	}
	_, err := untrusted.Open(ctx(t))
	if k, _ := pluginkit.KindOf(err); err == nil || k != pluginkit.KindPermanent || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Open without the CA = %v (%s), want permanent naming the certificate", err, k)
	}
	untrusted.Close(ctx(t))
}
