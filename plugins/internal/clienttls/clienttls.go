// Package clienttls decodes the tls attribute that the built-in sinks
// which dial a server share,
//
//	tls = { ca_file = "...", cert_file = "...", key_file = "...", server_name = "...", insecure_skip_verify = "true" }
//
// into the *tls.Config their client dials with. It is a map of strings
// because that is what a sink's config schema can declare
// (pluginkit.TypeStringMap). Every file is read during Configure, so a
// wrong path stops walcast at start instead of at the first connection,
// and every error is a *pluginkit.ConfigError on the attribute "tls",
// which the host points at in the pipeline file.
//
// It is internal to the built-in sinks on purpose: pluginkit's API is a
// versioned promise to third-party sinks, and this map's keys and
// messages are the built-in sinks' convention, free to change with them.
package clienttls

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"

	"github.com/walcast/walcast/pluginkit"
)

// Keys is the set of keys a sink's tls map takes.
type Keys int

const (
	// Settings are ca_file, cert_file, key_file, server_name and
	// insecure_skip_verify. Setting the map at all turns TLS on (for a
	// sink whose URL scheme already says whether TLS is used, the map
	// only refines it).
	Settings Keys = iota
	// SettingsAndEnabled are Settings and enabled: "true" when the map
	// is set, "false" to keep the settings written down but dial in
	// clear.
	SettingsAndEnabled
)

// Decode turns the tls map m into a client configuration (TLS 1.2 at
// least, the system's roots unless ca_file is set, server_name as
// written or else the name dialled). A nil m, or enabled = "false", is a
// nil configuration: dial in clear. The settings are checked and their
// files read even when enabled is "false", so that turning TLS on later
// does not meet a mistake made now.
func Decode(m map[string]string, keys Keys) (*tls.Config, error) {
	if m == nil {
		return nil, nil
	}
	d := decoder{keys: keys, enabled: true, cfg: &tls.Config{MinVersion: tls.VersionTLS12}}
	// Sorted, so that a map with two mistakes always names the same one.
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if msg := d.set(k, m[k]); msg != "" {
			return nil, bad(msg)
		}
	}
	if msg := d.loadKeyPair(); msg != "" {
		return nil, bad(msg)
	}
	if !d.enabled {
		return nil, nil
	}
	return d.cfg, nil
}

func bad(msg string) error { return &pluginkit.ConfigError{Field: "tls", Msg: msg} }

// decoder holds what the keys said so far.
type decoder struct {
	keys              Keys
	enabled           bool
	cfg               *tls.Config
	certFile, keyFile string // loaded together once every key is read
}

// set applies one key; it returns what is wrong with it, or "".
func (d *decoder) set(k, v string) string {
	switch k {
	case "enabled", "insecure_skip_verify":
		if k == "enabled" && d.keys != SettingsAndEnabled {
			return d.unknown(k)
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Sprintf("%s must be true or false, not %q", k, v)
		}
		if k == "enabled" {
			d.enabled = b
		} else {
			d.cfg.InsecureSkipVerify = b
		}
	case "ca_file":
		pem, err := os.ReadFile(v)
		if err != nil {
			return fmt.Sprintf("ca_file: %v", err)
		}
		d.cfg.RootCAs = x509.NewCertPool()
		if !d.cfg.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Sprintf("ca_file %s: no PEM certificate in it", v)
		}
	case "cert_file":
		d.certFile = v
	case "key_file":
		d.keyFile = v
	case "server_name":
		d.cfg.ServerName = v
	default:
		return d.unknown(k)
	}
	return ""
}

func (d *decoder) unknown(k string) string {
	if d.keys == SettingsAndEnabled {
		return fmt.Sprintf("unknown key %q; want enabled, ca_file, cert_file, key_file, server_name or insecure_skip_verify", k)
	}
	return fmt.Sprintf("unknown key %q; want ca_file, cert_file, key_file, server_name or insecure_skip_verify", k)
}

// loadKeyPair reads the client certificate for mutual TLS, if one is set.
func (d *decoder) loadKeyPair() string {
	if (d.certFile == "") != (d.keyFile == "") {
		return "cert_file and key_file go together"
	}
	if d.certFile == "" {
		return ""
	}
	cert, err := tls.LoadX509KeyPair(d.certFile, d.keyFile)
	if err != nil {
		return fmt.Sprintf("load client certificate: %v", err)
	}
	d.cfg.Certificates = []tls.Certificate{cert}
	return ""
}
