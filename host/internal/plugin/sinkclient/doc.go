// Package sinkclient is the host's side of the sink plugin boundary: it
// finds a sink's executable, launches it with hashicorp/go-plugin, speaks
// the sink service to it and turns its answers into the host's own terms:
// pluginkit's Info, OpenResult and ConfigError for the lifecycle calls,
// and the scheduler's attempt.Result and classified errors for Deliver.
// It is the only package of the host that knows the wire.
//
// The host offers every sink protocol version it speaks (proto/sink/v1
// and v2) and the plugin picks the newest it serves: a plugin built
// against any SDK since the first runs, and one that speaks none of them
// is refused at launch with both sides' versions named. The versions
// differ only in Deliver's answer, which version 2 can give per event;
// Plugin.Deliver reads either into the same attempt.Result.
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
