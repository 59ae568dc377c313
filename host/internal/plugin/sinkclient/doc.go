// Package sinkclient is the host's side of the sink plugin boundary: it
// finds a sink's executable, launches it with hashicorp/go-plugin, speaks
// the walcast.sink.v1 gRPC service to it and turns its answers back into
// pluginkit types and errors.
//
// A Plugin is one plugin process. Supervised wraps one and keeps a sink
// usable across crashes:
//
//	launched ──Configure──▶ configured ──Open──▶ open ──Deliver…──▶ open ──Close──▶ closed
//	                                              │
//	                                 process dies │ (Deliver fails, plugin not alive)
//	                                              ▼
//	                     dead ──(backoff 100ms…10s)──▶ relaunch, Configure, Open ──▶ open
//
// The batch whose Deliver failed is reported as retryable and the caller
// delivers it again; the host records an acknowledgement only after a
// Deliver resolved without error, so a crash never loses a batch, it only
// repeats one.
//
// Every method takes the caller's context and passes it over gRPC, so the
// host's deadlines reach the sink.
package sinkclient
