package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

// TestTLS: a target that takes TLS with a certificate of a CA made here.
// With sslmode=verify-full and that CA in sslrootcert (libpq's
// parameters, in dsn), the sink's connections are encrypted; without the
// CA, Open fails naming the certificate.
func TestTLS(t *testing.T) {
	dsn, c := ownCluster(t)
	ca := sslFiles(t, c.Data)
	db := connect(t, dsn)
	ctx := context.Background()
	for _, sql := range []string{
		`ALTER SYSTEM SET ssl_cert_file = 'server.crt'`,
		`ALTER SYSTEM SET ssl_key_file = 'server.key'`,
		`ALTER SYSTEM SET ssl = on`,
		`SELECT pg_reload_conf()`,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	verified := strings.Replace(dsn, "sslmode=disable", "sslmode=verify-full&sslrootcert="+ca, 1)
	if verified == dsn {
		t.Fatalf("no sslmode in %s", dsn)
	}
	s := openSink(t, map[string]any{"dsn": verified, "mode": "history"})
	if _, err := s.Deliver(ctx, pluginkit.Batch{Events: []pluginkit.Event{rowEvent(t, "orders", 0x5000000, 0, 1, 1)}}); err != nil {
		t.Fatal(err)
	}
	var sinkConns, encrypted int
	if err := db.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE s.ssl) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
		WHERE a.datname = current_database() AND a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()`).Scan(&sinkConns, &encrypted); err != nil {
		t.Fatal(err)
	}
	if sinkConns == 0 || encrypted != sinkConns {
		t.Fatalf("the sink's connections: %d, %d of them with TLS", sinkConns, encrypted)
	}

	untrusted := newSink(s.log)
	noCA := strings.Replace(dsn, "sslmode=disable", "sslmode=verify-full", 1)
	if err := untrusted.Configure(ctx, pluginkit.Setup{Config: cfgJSON(t, map[string]any{"dsn": noCA, "mode": "history"})}); err != nil {
		t.Fatal(err)
	}
	_, err := untrusted.Open(ctx)
	if k, _ := pluginkit.KindOf(err); err == nil || k != pluginkit.KindPermanent || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("Open without the CA = %v (%s), want permanent naming the certificate", err, k)
	}
	untrusted.Close(ctx)
}

// sslFiles writes server.crt and server.key (for 127.0.0.1, signed by a CA
// made here) into the cluster's data directory, owned by its owner as
// PostgreSQL requires, and returns the CA certificate's path.
func sslFiles(t *testing.T, data string) (caFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "walcast test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srv := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, caTmpl, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(data)
	if err != nil {
		t.Fatal(err)
	}
	owner := st.Sys().(*syscall.Stat_t)
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	for path, block := range map[string]*pem.Block{
		caFile:                            {Type: "CERTIFICATE", Bytes: caDER},
		filepath.Join(data, "server.crt"): {Type: "CERTIFICATE", Bytes: srvDER},
		filepath.Join(data, "server.key"): {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		if path != caFile {
			if err := os.Chown(path, int(owner.Uid), int(owner.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return caFile
}
