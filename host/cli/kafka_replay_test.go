package cli

import (
	"strings"
	"testing"
	"time"
)

// TestKafkaReplayOfParkedEvent: with eos (the default) the Kafka sink skips
// events at or below its checkpoint, and a parked event is below it by
// definition. An event too large for max_message_bytes is parked (with the
// later event of its row behind it) while the rest flows; with the limit
// raised, `walcast replay` through the running daemon writes both, and a
// read_committed librdkafka consumer (kcat) sees every committed change
// exactly once, row order kept.
func TestKafkaReplayOfParkedEvent(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	truthSlot(t, dsn, db, "truth_kreplay")
	addr := startKafka(t)
	pipeline := writePipeline(t, "kreplay", dsn, []string{"public.items"}, sinkSpec{
		ID: "kafka", SinkType: "kafka", Batch: 10,
		Config: kafkaConfig(addr, true, "walcast-kreplay") + "    max_message_bytes = 2048\n",
	})
	proc := startCapturing(t, db, pipeline)
	exec1(t, db, `INSERT INTO items SELECT g, 0, 'x' FROM generate_series(1, 5) g`)
	exec1(t, db, `UPDATE items SET pad = repeat('y', 4000) WHERE id = 3`) // too large
	exec1(t, db, `UPDATE items SET v = 1`)                                // row 3's later event parks behind it
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	parked := func() int { return parkedCount(db, "kreplay") }
	waitFor(t, "row 3's two events to be parked", time.Minute, func() bool { return parked() == 2 })
	waitFor(t, "the slot to move past the parked events", time.Minute, func() bool { return confirmedFlush(t, db, "walcast_kreplay") >= end })
	proc.stop()

	// Raise the limit and replay through the running daemon.
	editPipeline(t, pipeline, "max_message_bytes = 2048", "max_message_bytes = 1048576")
	proc = startWalcast(t, pipeline)
	// The daemon must be streaming (its slot active) for walcast replay to
	// hand it the request rather than replay directly.
	proc.waitLog(t, "streaming from slot")
	out, err := walcastCLI(t, "replay", pipeline, "--sink", "kafka", "--all")
	if err != nil || !strings.Contains(out, "asked the running daemon") || !strings.Contains(out, "walcast.parked holds 0") {
		t.Fatalf("walcast replay: %v\n%s", err, out)
	}
	exec1(t, db, `UPDATE items SET v = 2 WHERE id = 3`) // the row flows again after the replay
	end = lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	waitFor(t, "the slot to confirm everything", time.Minute, func() bool { return confirmedFlush(t, db, "walcast_kreplay") >= end })
	proc.stop()

	want := truth(t, db, "truth_kreplay", map[string]bool{"public.items": true})
	got := asReceived(t, readKcat(t, addr, kafkaTopic))
	if dups := verify(t, want, got); dups != 0 {
		t.Fatalf("kcat read_committed saw %d duplicates", dups)
	}
	if parked() != 0 {
		t.Fatalf("%d events still parked", parked())
	}
	t.Logf("%d changes, 2 parked and replayed; kcat read_committed saw each once", len(want))
}
