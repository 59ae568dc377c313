// Command walcast-sink-batchfiles is an example of a third-party walcast
// sink: it writes each batch of events to its own file in a directory, one
// envelope per line, named after the batch's first and last event id.
//
// It shows what a sink built on pluginkit has to get right: a config the
// host can check before the sink runs, a Deliver that returns nil only once
// the batch is durable, a context that is honoured, errors that say whether
// a retry can help, and redeliveries (at-least-once) recognised by the
// deterministic event ids. See README.md for building and installing it.
package main

import "github.com/walcast/walcast/pluginkit"

func main() { pluginkit.ServeBatch(New()) }
