// Command walcast-sink-webhook POSTs each batch of events as
// {"events":[...]} to an HTTP endpoint, signed the Standard Webhooks way
// when a secret is configured.
package main

import "github.com/walcast/walcast/pluginkit"

func main() { pluginkit.ServeBatch(New()) }
