// Command walcast-sink-stdout is the stdout/file sink: it writes every
// event's envelope as one JSON line, to walcast's stdout or appended to a
// file. It is meant for development and the demo.
package main

import "github.com/walcast/walcast/pluginkit"

func main() { pluginkit.Serve(New()) }
