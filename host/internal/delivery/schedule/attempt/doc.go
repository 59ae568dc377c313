// Package attempt is one delivery attempt as the scheduler and a sink's
// client agree on it: a Batch goes in, a Result or an error comes out.
//
// It is the scheduler's own vocabulary, a leaf every side can import:
// package schedule forms batches and decides what a result means
// (retry, pause, park, stop), the plugin client (plugin/sinkclient)
// converts it to and from whatever protocol version the sink's plugin
// speaks, and nothing here knows the wire or the SDK. In: the events of
// one attempt and what the scheduler knows of them as a whole (replay, a
// gap before). Out: which events failed and how.
//
// An attempt ends in one of three ways:
//
//   - a nil error and a Result naming no failed event: every event of the
//     batch is durably at the destination;
//   - a nil error and a Result naming failed events (Result.Failed): every
//     other event is at the destination, each named one failed with its own
//     Kind;
//   - an error: the batch failed as a whole, with the Kind KindOf reads
//     from it (KindRetry for an error this package did not classify).
package attempt
