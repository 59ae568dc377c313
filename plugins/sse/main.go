// Command walcast-sink-sse serves the change stream to browsers and other
// HTTP clients as server-sent events, resumable with Last-Event-ID within
// a retention window. It is not durable: it never holds the replication
// slot back.
package main

import "github.com/walcast/walcast/pluginkit"

func main() { pluginkit.ServeBatch(New()) }
