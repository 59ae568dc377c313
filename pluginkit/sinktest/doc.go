// Package sinktest is a conformance suite for walcast sinks. A sink's
// author runs it from the sink's own `go test`, in process, against a real
// (or faithfully faked) destination:
//
//	func TestConformance(t *testing.T) {
//		dir := t.TempDir()
//		sinktest.Run(t, sinktest.Config{
//			NewBatch: func() pluginkit.BatchSink { return mysink.New() },
//			Config:   json.RawMessage(`{"dir":"` + dir + `"}`),
//			InvalidConfigs: []sinktest.InvalidConfig{
//				{Name: "relative dir", Config: json.RawMessage(`{"dir":"out"}`), Field: "dir"},
//			},
//			Received: func() [][]byte { return readBack(t, dir) },
//		})
//	}
//
// A sink written against pluginkit.Sink sets New instead of NewBatch and
// is driven as pluginkit.Serve drives it.
//
// It checks the contract the host relies on, which the Sink interface can
// only state in comments:
//
//   - Info works before Configure, does not block, and declares a config
//     the host can check: a plugin type name, well-formed attribute names
//     and types, and Config carries every required attribute.
//   - Configure accepts Config, rejects every InvalidConfig with a
//     *pluginkit.ConfigError naming the attribute (that is how the host
//     points at the offending HCL line), and rejects Config minus each
//     required attribute the same way.
//   - Deliver of generated envelopes (several tables, every op, ids
//     increasing across batches) succeeds; with Received set, every payload
//     reached the destination byte for byte and in order. A nil error means
//     "durably at the destination": the host acknowledges on it, and the
//     slot then lets the WAL go. A replay of the last batch (Batch.Replay:
//     parked events, at or below any checkpoint the sink keeps) is written
//     again and reported as no duplicate (Deliver/Batches/Replay).
//   - Unless Info.Ordered, concurrent Delivers of different rows are safe
//     (run the suite with -race) and keep each row's order.
//   - Deliver returns within two seconds of its context ending, whether the
//     context was already done or the destination hangs (Config.Hang); the
//     host's deliver_timeout depends on it. Such an error is never
//     permanent: the batch is retried, not parked. With a context that is
//     already done a sink may still finish quick local work and succeed
//     (the stdout sink does), but then the batch must have arrived; against
//     a hanging destination it must fail.
//   - Errors are classified: Config.Faults make the destination fail, and
//     pluginkit.KindOf must give the kind each fault calls for; after the
//     fault the same batch delivers. Config.EventFaults spoil one event of
//     a batch: a BatchSink must name that event alone in a
//     *pluginkit.BatchError, with the kind the fault calls for, and write
//     the others. Any BatchError names events with an error each, and only
//     a BatchSink returns one.
//   - Close after Open succeeds, and neither a second Close nor a Close
//     without Open panics: a plugin that panics dies, and the host sees only
//     a broken connection.
//   - Nothing the sink started is still running once it is closed: the
//     suite ends by comparing the goroutines with those alive before it.
//
// Run uses t.Run for each check, so `go test -run 'TestConformance/Deliver'`
// selects parts of it, and Config.Skip skips checks that do not apply
// (a sink that cannot write replays, say, skips "Deliver/Batches/Replay").
// Do not call t.Parallel in the test that calls Run, and do not run other
// parallel tests in the same package: the goroutine check would count their
// goroutines as leaks.
//
// The same checks run outside go test through Check: `walcast plugin test
// ./walcast-sink-NAME` launches the built binary as the host does
// (go-plugin handshake, gRPC) and drives it with them, so a sink written
// in any language meets the same contract. Out of process the suite sees
// only what the sink answers: without Received, Hang and Faults those
// checks are skipped, and the goroutine check, which can only count the
// test process's goroutines, is skipped too. pluginkit never imports the
// host: the plugin test lives in the walcast command.
package sinktest
