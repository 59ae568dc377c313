// Command walcast-sink-grpc delivers each batch of events with one call to
// a Receiver service (proto/receiver/v1/receiver.proto), which receivers in
// any language implement from generated stubs. Plaintext, TLS or mutual
// TLS, optionally with a bearer token.
//
// Delivery is at least once: a batch counts as delivered only when the
// receiver answers OK, and it is sent again after any failure, timeout or
// restart, so the receiver dedupes on each event's id. The receiver's
// status code decides what the host does next (see classify).
package main

import "github.com/walcast/walcast/pluginkit"

func main() { pluginkit.ServeBatch(New()) }
