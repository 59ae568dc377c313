// Command walcast-sink-rabbitmq publishes every change to a RabbitMQ
// exchange (AMQP 0-9-1) with the routing key "<schema>.<table>" (or the
// configured pattern), as a persistent message whose message_id is the
// event id and whose body is the envelope.
//
// Delivery is at least once:
//
//   - Deliver returns nil only after the broker confirmed every message
//     of the batch (publisher confirms): for a durable queue, the message
//     is on disk. Only then does the host record the ack.
//   - A message the broker returns (mandatory: no queue bound for it) or
//     nacks is named in a BatchError, retried, and parked after
//     max_attempts; it is never counted delivered.
//   - A batch that fails part way, a lost confirm, a crash of walcast or of
//     the plugin after messages were confirmed but before the ack was
//     recorded: the host delivers those events again, and they are
//     published again, with the same message_id and the same bytes.
//     Consumers dedupe on message_id.
package main

import "github.com/walcast/walcast/pluginkit"

func main() { pluginkit.ServeBatch(New()) }
