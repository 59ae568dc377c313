// Command walcast-sink-stdout is the stdout/file sink: it writes every
// event's envelope as one JSON line, to walcast's stdout or appended to a
// file. It is meant for development and the demo.
package main

import (
	"runtime"

	"github.com/walcast/walcast/pluginkit"
)

func main() {
	// One thread runs Go code. The sink writes one batch at a time (Sink.mu)
	// and its work per batch is small; a second thread mostly woke up for
	// each request frame the gRPC reader handed over and spun looking for
	// work (the Go scheduler was over a third of the plugin's CPU profile
	// on a loaded machine; one thread cut the plugin's CPU per event by a
	// fifth: docs/benchmarks.md, "Where the daemon spends its time").
	// Blocking system calls (a write, an fsync) still get a thread of
	// their own from the runtime.
	runtime.GOMAXPROCS(1)
	pluginkit.Serve(New())
}
