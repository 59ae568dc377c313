// Package wire is how the walcast host and its sink plugins talk, below
// the SDK: the go-plugin handshake, the gRPC options and codec both sides
// use, the Deliver request's wire form, and how a sink's error kinds travel
// as gRPC status.
//
// It lives in the proto module, next to the service definitions it
// serves, so that it is not part of pluginkit's API: sink authors never
// import it, pluginkit.Serve is their whole interface to it. The host's
// plugin client (host/internal/plugin/sinkclient) and pluginkit's server are its
// two users, so that neither side can drift from the other. The service
// itself is proto/sink/v1; a plugin written in another language implements
// that service, the handshake below and the status mapping in status.go
// (docs/writing-a-sink.md describes them for other languages).
//
// This package follows the proto module's version, not pluginkit's: it
// may change in a minor version of the module as long as what travels on
// the wire for a given ProtocolVersion does not.
package wire

import (
	"math"

	"github.com/hashicorp/go-plugin"
)

// ProtocolVersion changes whenever proto/sink/v1 or this package changes
// incompatibly; the host then refuses to start an older plugin instead of
// failing on its first call.
const ProtocolVersion = 1

// Handshake is the go-plugin handshake every walcast sink plugin and the
// host agree on. The cookie only stops a user from running a plugin binary
// by hand by accident; it is not a security measure (the SHA-256 check of
// installed plugins is). It is a function so that nobody can change it for
// everyone.
func Handshake() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		ProtocolVersion:  ProtocolVersion,
		MagicCookieKey:   "WALCAST_PLUGIN",
		MagicCookieValue: "d1c8a3f5-walcast-sink",
	}
}

// PluginName is the name the sink service is dispensed under in the
// go-plugin plugin set.
const PluginName = "sink"

// MaxMessageSize is the largest gRPC message either side accepts: 2 GiB,
// the most a protobuf message can be. gRPC's default of 4 MiB on the
// receiving side is too small for a batch of wide rows, and PostgreSQL
// allows a single value of up to 1 GB, so one event can be that large.
// The host splits batches by bytes (16 MiB by default); a larger event goes
// alone.
const MaxMessageSize = math.MaxInt32

// EnvLogLevel is the environment variable through which the host tells a
// plugin which log level it will keep ("trace", "debug", "info", "warn" or
// "error"), so that a plugin does not format lines the host drops.
const EnvLogLevel = "WALCAST_PLUGIN_LOG_LEVEL"

// EnvCPUProfile, when set in walcast's environment (plugins inherit
// WALCAST_PLUGIN_* variables), names a file into which a plugin writes a
// CPU profile of its whole run: what the benchmark's -profile uses to see
// where a plugin's time goes.
const EnvCPUProfile = "WALCAST_PLUGIN_CPU_PROFILE"
