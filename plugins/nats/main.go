// Command walcast-sink-nats publishes every change to NATS JetStream, to
// the subject "<subject_prefix>.<schema>.<table>" (or the one `subjects`
// names), the envelope as the message body.
//
// The guarantee rests on JetStream's duplicate window. Every message
// carries Nats-Msg-Id = its event id, which never changes on redelivery,
// and Nats-Expected-Stream = the configured stream. The invariants:
//
//   - Deliver returns nil only after the stream acknowledged every
//     message of the batch (stored it, or recognised it as a duplicate),
//     so the host records an ack only for events the stream holds.
//   - A message whose id the stream saw within its duplicate window is
//     not stored again. So an event is stored once as long as every
//     redelivery of it comes within the window of its first publish;
//     one that comes later is stored a second time, with the same id
//     and the same bytes.
//   - Open (and the first Deliver after a reconnect) checks that the
//     stream stores every table's subject and that its window is at
//     least min_duplicate_window, and refuses the stream otherwise.
package main

import "github.com/walcast/walcast/pluginkit"

func main() { pluginkit.ServeBatch(New()) }
