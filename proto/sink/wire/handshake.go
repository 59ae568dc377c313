package wire

import (
	"math"

	"github.com/hashicorp/go-plugin"
)

// The protocol versions, go-plugin's application protocol version. A new
// version is added whenever a service or this package changes what
// travels on the wire incompatibly; the host keeps speaking the older
// ones, so that plugins built against an older SDK, or written in another
// language against an older service, keep running. go-plugin negotiates:
// the host offers every version it speaks (PLUGIN_PROTOCOL_VERSIONS), the
// plugin answers with the highest one it serves, and the host refuses a
// plugin that serves none of them before any call.
const (
	// ProtocolV1 is proto/sink/v1: a Deliver succeeds or fails as a whole.
	ProtocolV1 = 1
	// ProtocolV2 is proto/sink/v2: Deliver's answer names the events that
	// failed (EventFault).
	ProtocolV2 = 2
)

// Handshake is the go-plugin handshake every walcast sink plugin and the
// host agree on. Its ProtocolVersion is the oldest version: both sides
// list their versions in go-plugin's VersionedPlugins, which takes
// precedence. The cookie only stops a user from running a plugin binary
// by hand by accident; it is not a security measure (the SHA-256 check of
// installed plugins is). It is a function so that nobody can change it for
// everyone.
func Handshake() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		ProtocolVersion:  ProtocolV1,
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
