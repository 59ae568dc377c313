package clienttls

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walcast/walcast/plugins/internal/servertest"

	"github.com/walcast/walcast/pluginkit"
)

// Every mistake is a ConfigError on "tls" with the message the sinks
// have always given (sink tests and users' scripts may match them), for
// both key sets.
func TestDecodeErrors(t *testing.T) {
	certs := servertest.WriteCerts(t)
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	const wantKeys = "ca_file, cert_file, key_file, server_name or insecure_skip_verify"
	tests := []struct {
		name string
		m    map[string]string
		keys Keys
		want string
	}{
		{"missing ca_file", map[string]string{"ca_file": missing}, Settings, "ca_file: open " + missing + ": no such file or directory"},
		{"ca_file without PEM", map[string]string{"ca_file": notPEM}, SettingsAndEnabled, "ca_file " + notPEM + ": no PEM certificate in it"},
		{"cert without key", map[string]string{"cert_file": certs.ClientCert}, Settings, "cert_file and key_file go together"},
		{"key without cert", map[string]string{"key_file": certs.ClientKey}, SettingsAndEnabled, "cert_file and key_file go together"},
		{"key of another cert", map[string]string{"cert_file": certs.ClientCert, "key_file": certs.ServerKey}, Settings,
			"load client certificate: tls: private key does not match public key"},
		{"missing cert", map[string]string{"cert_file": missing, "key_file": certs.ClientKey}, Settings,
			"load client certificate: open " + missing + ": no such file or directory"},
		{"bad insecure_skip_verify", map[string]string{"insecure_skip_verify": "maybe"}, Settings, `insecure_skip_verify must be true or false, not "maybe"`},
		{"bad enabled", map[string]string{"enabled": "nope"}, SettingsAndEnabled, `enabled must be true or false, not "nope"`},
		{"unknown key", map[string]string{"verify": "no"}, Settings, `unknown key "verify"; want ` + wantKeys},
		{"unknown key, enabled taken", map[string]string{"verify": "no"}, SettingsAndEnabled, `unknown key "verify"; want enabled, ` + wantKeys},
		{"enabled not taken", map[string]string{"enabled": "true"}, Settings, `unknown key "enabled"; want ` + wantKeys},
		// The files are read even with TLS off: turning it on later must
		// not meet a mistake made now.
		{"disabled still checked", map[string]string{"enabled": "false", "ca_file": missing}, SettingsAndEnabled, "ca_file: open " + missing + ": no such file or directory"},
		// Keys are read in order, so two mistakes always name the same one.
		{"first of two mistakes", map[string]string{"server_name": "x", "zone": "1", "insecure_skip_verify": "maybe"}, Settings,
			`insecure_skip_verify must be true or false, not "maybe"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 5 { // map order differs between runs; the answer must not
				cfg, err := Decode(tt.m, tt.keys)
				var ce *pluginkit.ConfigError
				if cfg != nil || !errors.As(err, &ce) || ce.Field != "tls" || ce.Msg != tt.want {
					t.Fatalf("Decode(%v) = %v, %v; want a ConfigError on tls: %s", tt.m, cfg, err, tt.want)
				}
			}
		})
	}
}

// What the settings turn into, and when there is no TLS at all.
func TestDecodeSettings(t *testing.T) {
	certs := servertest.WriteCerts(t)
	for _, keys := range []Keys{Settings, SettingsAndEnabled} {
		if cfg, err := Decode(nil, keys); cfg != nil || err != nil {
			t.Fatalf("Decode(nil) = %v, %v; want no TLS", cfg, err)
		}
		cfg, err := Decode(map[string]string{}, keys)
		if err != nil || cfg == nil || cfg.MinVersion != tls.VersionTLS12 || cfg.RootCAs != nil || cfg.ServerName != "" || cfg.InsecureSkipVerify || len(cfg.Certificates) != 0 {
			t.Fatalf("Decode({}) = %+v, %v; want TLS 1.2+ with the system's roots", cfg, err)
		}
		cfg, err = Decode(map[string]string{"ca_file": certs.CA, "cert_file": certs.ClientCert, "key_file": certs.ClientKey,
			"server_name": "db.internal", "insecure_skip_verify": "true"}, keys)
		if err != nil || cfg.RootCAs == nil || cfg.ServerName != "db.internal" || !cfg.InsecureSkipVerify || len(cfg.Certificates) != 1 {
			t.Fatalf("Decode(every key) = %+v, %v", cfg, err)
		}
	}
	if cfg, err := Decode(map[string]string{"enabled": "false", "ca_file": certs.CA}, SettingsAndEnabled); cfg != nil || err != nil {
		t.Fatalf(`Decode(enabled = "false") = %v, %v; want no TLS`, cfg, err)
	}
	if cfg, err := Decode(map[string]string{"enabled": "true"}, SettingsAndEnabled); cfg == nil || err != nil {
		t.Fatalf(`Decode(enabled = "true") = %v, %v; want TLS`, cfg, err)
	}
}

// The configuration does what its keys say in a real handshake with a
// server that requires a client certificate: the CA verifies the server,
// the client certificate is presented, server_name is the name checked.
func TestDecodeHandshake(t *testing.T) {
	certs := servertest.WriteCerts(t)
	l, err := tls.Listen("tcp", "127.0.0.1:0", certs.ServerConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(time.Minute))
				if _, err := io.ReadFull(c, make([]byte, 4)); err == nil {
					c.Write([]byte("pong"))
				}
			}()
		}
	}()
	addr := l.Addr().String()
	tests := []struct {
		name string
		m    map[string]string
		want string // in the handshake's error; "" for success
	}{
		{"CA and client certificate", certs.ClientTLS(), ""},
		{"system roots only", certs.ClientTLS("ca_file"), "certificate signed by unknown authority"},
		{"no client certificate", certs.ClientTLS("cert_file", "key_file"), "certificate required"},
		{"another server name", map[string]string{"ca_file": certs.CA, "cert_file": certs.ClientCert, "key_file": certs.ClientKey, "server_name": "elsewhere"},
			"wanted to match elsewhere"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Decode(tt.m, Settings)
			if err != nil {
				t.Fatal(err)
			}
			err = handshake(t, addr, cfg)
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("handshake = %v, want %q", err, tt.want)
			}
		})
	}
}

// handshake dials addr and completes a TLS handshake and one round trip
// (with TLS 1.3 the server refuses a missing client certificate only
// after the client's handshake has returned).
func handshake(t *testing.T, addr string, cfg *tls.Config) error {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	d := tls.Dialer{Config: cfg}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	_, err = io.ReadFull(c, make([]byte, 4))
	return err
}
