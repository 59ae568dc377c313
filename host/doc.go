// Package host is walcast's engine; this package itself is library mode:
// the committed changes of PostgreSQL tables, read and acknowledged inside
// your own Go program, with the same capture, decoding, event ids and
// envelope as the walcast daemon.
//
//	stream, err := host.Open(ctx, host.StreamConfig{
//		DSN:    dsn,
//		Tables: []string{"public.orders"},
//		Slot:   "orders_indexer",
//	})
//	if err != nil { ... }
//	defer stream.Close(context.Background())
//	for {
//		ev, err := stream.Next(ctx)
//		if err != nil { ... }
//		handle(ev) // dedupe on ev.ID
//		if err := stream.Ack(ev.ID); err != nil { ... }
//	}
//
// # Guarantee: at-least-once
//
// Durability lives in the replication slot. The slot's confirmed position
// only ever moves to the end of a released transaction, and PostgreSQL
// resends everything after it when a stream on the slot is opened again.
// An event goes through these states:
//
//	in the slot ──Next──▶ delivered ──Ack (cumulative)──▶ acknowledged
//	acknowledged, last event of its transaction, transaction committed ──▶ released
//	released ──next status update (≤ ~100ms) or Close──▶ confirmed to PostgreSQL
//
// Invariant: the confirmed position never passes an event that was not
// acknowledged. So after a crash, a new stream on the same slot delivers
// again every transaction that was not confirmed:
//
//   - nothing unacknowledged is lost;
//   - a transaction acked only part-way is delivered again whole, with
//     identical ids;
//   - a transaction released in the last moments before the crash (before
//     its status update reached PostgreSQL) may be delivered again.
//
// Processing exactly once is therefore the consumer's job, and a simple
// one: record each processed ev.ID in the same database transaction as its
// effect and skip ids already recorded (see examples/library).
//
// # Memory
//
// Capture reads at most StreamConfig.Buffer events ahead of Next; when the
// consumer is slower, reading from the slot pauses (the changes wait in
// PostgreSQL) while the replication connection keeps answering the server.
// Transactions are never buffered whole, and the ack bookkeeping keeps a
// few numbers per transaction, not per event, so a million-row transaction
// streams in constant memory.
package host
