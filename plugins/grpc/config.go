package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

const defaultTimeout = 30 * time.Second

// configFields declares the config block.
var configFields = []pluginkit.ConfigField{
	{Name: "address", Type: pluginkit.TypeString, Required: true, Doc: `The receiver, "host:port". A DNS name resolving to several addresses is connected to the first that answers.`},
	{Name: "tls", Type: pluginkit.TypeBool, Doc: "Connect with TLS, verifying the receiver's certificate. Default false: plaintext, for a receiver on a trusted network only."},
	{Name: "ca_file", Type: pluginkit.TypeString, Doc: "PEM file of the CA certificates that verify the receiver (tls only). Default: the system's roots."},
	{Name: "cert_file", Type: pluginkit.TypeString, Doc: "PEM client certificate presented to the receiver, for mutual TLS (tls only; with key_file)."},
	{Name: "key_file", Type: pluginkit.TypeString, Doc: "PEM private key of cert_file (tls only; with cert_file)."},
	{Name: "server_name", Type: pluginkit.TypeString, Doc: "Name the receiver's certificate is verified against, and sent as SNI (tls only). Default: the host of address."},
	{Name: "token", Type: pluginkit.TypeString, Doc: `Bearer token sent with every call as "authorization: Bearer <token>" metadata. Requires tls unless insecure_token is set.`},
	{Name: "insecure_token", Type: pluginkit.TypeBool, Doc: "Allow token without tls, so that it travels in clear. Default false."},
	{Name: "timeout", Type: pluginkit.TypeDuration, Doc: `Deadline of one Deliver call, answer included; the sink's deliver_timeout bounds it too. Default "30s".`},
}

// config is the JSON the host sends, as written in the pipeline.
type config struct {
	Address       string `json:"address"`
	TLS           bool   `json:"tls"`
	CAFile        string `json:"ca_file"`
	CertFile      string `json:"cert_file"`
	KeyFile       string `json:"key_file"`
	ServerName    string `json:"server_name"`
	Token         string `json:"token"`
	InsecureToken bool   `json:"insecure_token"`
	Timeout       string `json:"timeout"`
}

// settings is the validated config, with the files it names already read:
// a missing or broken file is reported by Configure (and so by `walcast
// validate`), not by the first delivery.
type settings struct {
	address string
	tls     *tls.Config // nil: plaintext
	token   string      // empty: no authorization metadata
	// tokenInClear allows the token over plaintext (insecure_token).
	tokenInClear bool
	timeout      time.Duration
}

// decodeConfig decodes and validates the config block.
func decodeConfig(raw json.RawMessage) (settings, error) {
	var c config
	if err := pluginkit.DecodeConfig(raw, &c); err != nil {
		return settings{}, err
	}
	return parseConfig(c)
}

func parseConfig(c config) (settings, error) {
	st := settings{token: c.Token, tokenInClear: c.InsecureToken, timeout: defaultTimeout}
	if err := checkAddress(c.Address); err != nil {
		return st, err
	}
	st.address = c.Address

	if c.Timeout != "" {
		d, err := time.ParseDuration(c.Timeout)
		if err != nil || d <= 0 {
			return st, &pluginkit.ConfigError{Field: "timeout", Msg: fmt.Sprintf("must be a positive duration such as \"30s\", not %q", c.Timeout)}
		}
		st.timeout = d
	}

	if err := checkToken(c.Token, c.TLS, c.InsecureToken); err != nil {
		return st, err
	}

	if !c.TLS {
		// A TLS setting without tls = true means the user believes the
		// connection is encrypted: say it is not, instead of ignoring it.
		for _, f := range []struct{ name, value string }{
			{"ca_file", c.CAFile}, {"cert_file", c.CertFile}, {"key_file", c.KeyFile}, {"server_name", c.ServerName},
		} {
			if f.value != "" {
				return st, &pluginkit.ConfigError{Field: f.name, Msg: "has no effect without tls = true; set tls = true"}
			}
		}
		return st, nil
	}
	var err error
	st.tls, err = tlsConfig(c)
	return st, err
}

// checkAddress accepts "host:port" with a non-empty host and a numeric
// port, the form gRPC's default (DNS) resolver dials.
func checkAddress(addr string) error {
	if addr == "" {
		return &pluginkit.ConfigError{Field: "address", Msg: `is required ("host:port")`}
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return &pluginkit.ConfigError{Field: "address", Msg: fmt.Sprintf(`must be "host:port": %v`, err)}
	}
	if host == "" {
		return &pluginkit.ConfigError{Field: "address", Msg: fmt.Sprintf(`%q has no host; write "localhost:%s" for this machine`, addr, port)}
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return &pluginkit.ConfigError{Field: "address", Msg: fmt.Sprintf("%q: the port must be a number from 1 to 65535", addr)}
	}
	return nil
}

// checkToken refuses a token that would travel in clear by accident, and
// one gRPC could not send as a metadata value.
func checkToken(token string, useTLS, inClear bool) error {
	if token == "" {
		return nil
	}
	for i := range len(token) {
		if c := token[i]; c < 0x21 || c > 0x7e {
			return &pluginkit.ConfigError{Field: "token", Msg: "must be printable ASCII without spaces (it is sent as gRPC metadata)"}
		}
	}
	if !useTLS && !inClear {
		return &pluginkit.ConfigError{Field: "token", Msg: "would be sent in clear: set tls = true, or insecure_token = true to accept that on a trusted network"}
	}
	return nil
}

// tlsConfig builds the client TLS configuration, reading every file now.
func tlsConfig(c config) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pool, err := loadCAs(c.CAFile)
		if err != nil {
			return nil, &pluginkit.ConfigError{Field: "ca_file", Msg: err.Error()}
		}
		tc.RootCAs = pool
	}
	switch {
	case c.CertFile != "" && c.KeyFile == "":
		return nil, &pluginkit.ConfigError{Field: "key_file", Msg: "is required with cert_file"}
	case c.CertFile == "" && c.KeyFile != "":
		return nil, &pluginkit.ConfigError{Field: "cert_file", Msg: "is required with key_file"}
	case c.CertFile != "":
		cert, err := loadKeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// loadCAs reads a PEM file of CA certificates.
func loadCAs(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// loadKeyPair reads the client certificate and its key, naming the field
// at fault: cert_file for an unreadable file or one without a certificate,
// key_file for an unreadable key or one that does not match.
func loadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, &pluginkit.ConfigError{Field: "cert_file", Msg: err.Error()}
	}
	if !hasPEMBlock(certPEM, "CERTIFICATE") {
		return tls.Certificate{}, &pluginkit.ConfigError{Field: "cert_file", Msg: fmt.Sprintf("%s holds no PEM certificate", certFile)}
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, &pluginkit.ConfigError{Field: "key_file", Msg: err.Error()}
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, &pluginkit.ConfigError{Field: "key_file", Msg: fmt.Sprintf("%s is not the key of %s: %v", keyFile, certFile, err)}
	}
	return cert, nil
}

// hasPEMBlock reports whether b holds a PEM block of the given type.
func hasPEMBlock(b []byte, typ string) bool {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return false
		}
		if block.Type == typ {
			return true
		}
	}
}
