// Package wire is how the walcast host and its sink plugins talk, below
// the SDK: the go-plugin handshake and the protocol versions, the gRPC
// options and codec both sides use, the Deliver request's wire form, how
// a sink's error kinds travel as gRPC status, and how a version 2 Deliver
// names the events that failed.
//
// It lives in the proto module, next to the service definitions it
// serves, so that it is not part of pluginkit's API: sink authors never
// import it, pluginkit.Serve is their whole interface to it. The host's
// plugin client (host/internal/plugin/sinkclient) and pluginkit's server
// are its two users, so that neither side can drift from the other. The
// services themselves are proto/sink/v1 and proto/sink/v2; a plugin
// written in another language implements one of them, the handshake below
// and the status mapping in status.go (docs/writing-a-sink.md describes
// them for other languages).
//
// This package follows the proto module's version, not pluginkit's: it
// may change in a minor version of the module as long as what travels on
// the wire for a given protocol version does not.
package wire
