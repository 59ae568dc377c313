package cli

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walcast/walcast/pluginkit"
)

// TestFailoverBelowSinkCheckpoints is a failover to a standby that
// stopped replaying well before the primary's last changes, so the new
// primary's ids (its WAL continues from where the standby stopped) are
// LOWER than the checkpoints the postgres sink (its checkpoint row in the
// target) and the kafka sink (its checkpoint topic) keep of their own.
// With on_gap = "resync" the same walcast process follows the promoted
// standby, records the gap and resyncs; each batch carries the new slot's
// epoch (pluginkit.Batch.Epoch), so neither walcast nor the sinks skip the
// new primary's events by the old checkpoints: the mirror and the copy a
// consumer keeps of the read_committed topic with the marker contract
// both end equal to the new primary, the rows only the old primary had
// swept. Before the epoch, walcast skipped everything up to the sinks'
// old checkpoints (the resync's markers and rows, the new changes): the
// mirror kept the old primary's rows.
func TestFailoverBelowSinkCheckpoints(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	start := time.Now()
	fo := newFailoverPair(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	primary, standby, pdsn, pdb, dsn := fo.primary, fo.standby, fo.pdsn, fo.pdb, fo.dsn

	// The target is a database of the package's shared cluster: one
	// initdb less.
	tdsn := cluster.Database(t)
	tg := &pgTarget{c: cluster, dsn: tdsn, db: connect(t, tdsn)}
	tg.copySchema(t, pdsn, "public.items")
	addr := startKafka(t)
	// One partition: its offset order is the order the sink wrote in,
	// which the consumer below applies the contract in.
	pipeline := writePipeline(t, "lowfail", dsn, []string{"public.items"},
		sinkSpec{ID: "mirror", SinkType: "postgres", Config: fmt.Sprintf("    dsn = %q\n    create_tables = false\n", tg.dsn)},
		sinkSpec{ID: "k", SinkType: "kafka", Config: kafkaConfig(addr, true, "walcast-lowfail") + "    create_topics = { partitions = 1 }\n"})
	setSourceAttr(t, pipeline, `on_gap = "resync"`)
	t.Logf("clusters and broker ready after %s", time.Since(start).Round(100*time.Millisecond))
	proc := startCapturing(t, pdb, pipeline)
	exec1(t, pdb, `INSERT INTO items SELECT g, 0, 'both' FROM generate_series(1, 300) g`)
	waitConfirmed(t, pdb, "lowfail", time.Minute)

	// The standby has everything so far (the walcast schema, the
	// pipeline's record and checkpoints), then stops replaying.
	var here string
	if err := pdb.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&here); err != nil {
		t.Fatal(err)
	}
	sdbReplica := connect(t, standby.DSN(fo.dbname))
	waitFor(t, "the standby to replay "+here, time.Minute, func() bool {
		var ok bool
		return sdbReplica.QueryRow(ctx, `SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn`, here).Scan(&ok) == nil && ok
	})
	sdbReplica.Close(ctx)
	if err := standby.Stop(ctx, "fast"); err != nil {
		t.Fatal(err)
	}

	// Only the old primary has these: a few MB of WAL the new primary's
	// ids will start below.
	exec1(t, pdb, `INSERT INTO items SELECT g, 1, repeat('old primary only ', 60) FROM generate_series(301, 3300) g`)
	exec1(t, pdb, `DELETE FROM items WHERE id % 10 = 0 AND id <= 300`)
	exec1(t, pdb, `UPDATE items SET v = 9 WHERE id % 10 = 1 AND id <= 300`)
	waitConfirmed(t, pdb, "lowfail", time.Minute)
	var oldRaw string
	if err := tg.db.QueryRow(ctx, `SELECT event_id FROM walcast_checkpoints`).Scan(&oldRaw); err != nil {
		t.Fatal(err)
	}
	oldCP, err := pluginkit.ParseEventID(oldRaw)
	if err != nil {
		t.Fatal(err)
	}

	t.Logf("old primary's changes delivered after %s", time.Since(start).Round(100*time.Millisecond))
	if err := primary.Stop(ctx, "immediate"); err != nil {
		t.Fatal(err)
	}
	if err := standby.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	t.Logf("standby promoted after %s", time.Since(start).Round(100*time.Millisecond))
	sdsn := standby.DSN(fo.dbname)
	sdb := connect(t, sdsn)
	var id int64
	waitFor(t, "a resync queued on the new primary", 2*time.Minute, func() bool {
		return sdb.QueryRow(ctx, `SELECT id FROM walcast.backfills WHERE pipeline = 'lowfail' AND resync ORDER BY id DESC LIMIT 1`).Scan(&id) == nil
	})
	t.Logf("resync %d queued %s after the promotion", id, time.Since(promoted).Round(100*time.Millisecond))
	waitFor(t, "the resync to finish", 2*time.Minute, func() bool { s, _, _ := backfillState(t, sdb, id); return s == "done" })
	// Changes on the new primary after the resync, below the old
	// checkpoints too.
	exec1(t, sdb, `INSERT INTO items SELECT g, 2, 'new primary' FROM generate_series(5001, 5020) g`)
	exec1(t, sdb, `UPDATE items SET v = 3 WHERE id % 10 = 2 AND id <= 300`)
	exec1(t, sdb, `DELETE FROM items WHERE id % 10 = 3 AND id <= 300`)
	waitConfirmed(t, sdb, "lowfail", 2*time.Minute)
	status, _ := walcastOut(t, "status", pipeline)
	log := proc.logText()
	proc.stop()

	var newRaw string
	if err := sdb.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&newRaw); err != nil {
		t.Fatal(err)
	}
	if now, err := pluginkit.ParseLSN(newRaw); err != nil || now >= oldCP.CommitLSN {
		t.Fatalf("the new primary's WAL is at %s, not below the sinks' old checkpoint %s (%v): the test proves nothing", newRaw, oldCP, err)
	}
	checkSameRows(t, sdsn, tg, "public.items")

	recs := readKafka(t, addr, "walcast.public.items", kgo.ReadCommitted())
	slices.SortFunc(recs, func(a, b kafkaRecord) int { return int(a.Offset - b.Offset) })
	evs := asReceived(t, recs)
	m := newResyncMirror([]string{"id"}, true).applyAll(t, evs)
	if d := m.diff(t, sdb, "items"); len(d) > 0 {
		t.Fatalf("the copy kept from the read_committed topic with the marker contract differs from the new primary in %d rows, e.g. %s", len(d), d[0])
	}
	if m.swept < 3000 {
		t.Fatalf("%d rows swept from the topic's copy at resync_end, want the 3000 only the old primary had", m.swept)
	}
	wantAll(t, status, "gap accepted", "resync done")
	wantAll(t, log, "the destination's own checkpoint belongs to an earlier slot", "first batch of a new epoch")
	t.Logf("sinks' checkpoint before the failover %s, new primary's WAL at %s after; %d records, %d rows swept from the topic's copy", oldCP, newRaw, len(evs), m.swept)
}
