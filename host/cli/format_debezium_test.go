package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walcast/walcast/host/pgtest"
	"github.com/walcast/walcast/pluginkit"
)

// dbzOps maps Debezium's operations to the envelope's.
var dbzOps = map[string]string{"c": "insert", "u": "update", "d": "delete", "r": "read", "t": "truncate"}

// dbzValue is what a consumer written against Debezium's documentation
// reads of a change event's value (schemas off).
type dbzValue struct {
	Before map[string]any `json:"before"`
	After  map[string]any `json:"after"`
	Source struct {
		Connector string `json:"connector"`
		Schema    string `json:"schema"`
		Table     string `json:"table"`
		TxID      uint32 `json:"txId"`
		LSN       uint64 `json:"lsn"`
	} `json:"source"`
	Op string `json:"op"`
}

// dbzReceived reads Kafka records written with format = "debezium" as the
// harness's received events: the id from the walcast-id header (a
// Debezium record has no id of its own), the rest from the value as
// Debezium documents it, and the key the record's key. Tombstones (null
// values) are checked to follow a delete of the same key, then left out.
func dbzReceived(t testing.TB, rs []kafkaRecord) []received {
	t.Helper()
	out := make([]received, 0, len(rs))
	var lastDelete []byte
	for _, r := range rs {
		if r.Value == nil {
			if !bytes.Equal(r.Key, lastDelete) {
				t.Fatalf("partition %d offset %d: tombstone for key %s does not follow a delete of that key", r.Partition, r.Offset, r.Key)
			}
			lastDelete = nil
			continue
		}
		var v dbzValue
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("partition %d offset %d: value is not a Debezium change event: %v: %.200s", r.Partition, r.Offset, err, r.Value)
		}
		op, ok := dbzOps[v.Op]
		if !ok || v.Source.Connector != "postgresql" {
			t.Fatalf("partition %d offset %d: op %q connector %q: %.300s", r.Partition, r.Offset, v.Op, v.Source.Connector, r.Value)
		}
		id, err := pluginkit.ParseEventID(r.Headers["walcast-id"])
		if err != nil {
			t.Fatalf("partition %d offset %d: walcast-id header: %v", r.Partition, r.Offset, err)
		}
		if id.CommitLSN != v.Source.LSN {
			t.Fatalf("event %s: source.lsn %d is not the commit LSN", id, v.Source.LSN)
		}
		var key bytes.Buffer
		if err := json.Compact(&key, r.Key); err != nil {
			t.Fatalf("event %s: record key %s: %v", id, r.Key, err)
		}
		k := key.String()
		if k == fmt.Sprintf(`{"walcast_id":%q}`, id.String()) {
			k = "null" // truncates (docs/formats.md)
		}
		if op == "delete" {
			lastDelete = r.Key
		}
		out = append(out, received{ID: id, Xid: v.Source.TxID, Table: v.Source.Table, Op: op, Key: k, Raw: r.Value})
	}
	return out
}

// applyDebezium is a consumer of (id int, v int) tables written against
// Debezium's documented event shape: c, r and u upsert "after", d removes
// "before", t empties the table. It dedupes on the walcast id.
func applyDebezium(t testing.TB, evs []received) mirror {
	t.Helper()
	m := mirror{}
	seen := map[pluginkit.EventID]bool{}
	for _, e := range evs {
		if seen[e.ID] {
			continue
		}
		seen[e.ID] = true
		var v dbzValue
		if err := json.Unmarshal(e.Raw, &v); err != nil {
			t.Fatal(err)
		}
		tb := m[e.Table]
		if tb == nil {
			tb = map[int]int{}
			m[e.Table] = tb
		}
		switch v.Op {
		case "c", "r", "u":
			tb[int(v.After["id"].(float64))] = int(v.After["v"].(float64))
		case "d":
			delete(tb, int(v.Before["id"].(float64)))
		case "t":
			clear(tb)
		}
	}
	return m
}

// TestKafkaCrashLoopDebezium is TestKafkaCrashLoopExactlyOnce with
// format = "debezium": walcast is SIGKILLed five times while 20,000+
// changes stream into Kafka as Debezium change events, and afterwards
// franz-go and kcat (read_committed) each see every committed change
// exactly once, redeliveries byte-identical under the same walcast-id, in
// per-row order; every delete is followed by its tombstone; and a
// consumer applying the Debezium events rebuilds the table.
func TestKafkaCrashLoopDebezium(t *testing.T) {
	parallel(t)
	needKcat(t)
	start := time.Now()
	res := runKafkaCrashLoop(t, "kdbz", kafkaLoop{eos: true, kills: pgtest.Chaos(t, 5), top: "  format = \"debezium\"\n"})
	committed := readKafka(t, res.addr, kafkaTopic, kgo.ReadCommitted())
	got := dbzReceived(t, committed)
	if dups := verify(t, res.want, got); dups != 0 {
		t.Errorf("franz-go read_committed consumer saw %d duplicates, want none", dups)
	}
	kc := dbzReceived(t, readKcat(t, res.addr, kafkaTopic))
	if dups := verify(t, res.want, kc); dups != 0 {
		t.Errorf("kcat read_committed consumer saw %d duplicates, want none", dups)
	}
	uncommitted := dbzReceived(t, readKafka(t, res.addr, kafkaTopic, kgo.ReadUncommitted()))
	udups := verify(t, res.want, uncommitted)

	checkMirror(t, res.db, applyDebezium(t, got), "items")
	t.Logf("%d changes, host SIGKILLs as logged (%d with Kafka ahead of walcast.checkpoints); read_committed %d records; read_uncommitted %d duplicates (aborted transactions, same bytes); in %s",
		len(res.want), res.ahead, len(committed), udups, time.Since(start).Round(time.Second))
}

// TestKafkaDebeziumKeyChange: on Kafka, updates that change the key arrive
// as Debezium's connector writes a primary key update (delete of the old
// key with __debezium.newkey, its tombstone, create of the new key with
// __debezium.oldkey), so a consumer that knows only c, r, u and d
// (kcat reading the records) rebuilds the table.
func TestKafkaDebeziumKeyChange(t *testing.T) {
	needKcat(t)
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	addr := startKafka(t)
	pipeline := writePipeline(t, "kdbzkey", dsn, []string{"public.items"}, sinkSpec{
		ID: "kafka", SinkType: "kafka", Config: kafkaConfig(addr, true, "walcast-kdbzkey"),
		Top: "  format = \"debezium\"\n  debezium {\n    schemas = true\n  }\n",
	})
	proc := startWalcast(t, pipeline)
	defer proc.stop()
	waitSlot(t, db, "walcast_kdbzkey")
	exec1(t, db, `INSERT INTO items SELECT g, g, 'x' FROM generate_series(1, 20) g`)
	exec1(t, db, `UPDATE items SET id = id + 100 WHERE id <= 5`)
	exec1(t, db, `UPDATE items SET v = v + 1 WHERE id > 100`)
	exec1(t, db, `DELETE FROM items WHERE id IN (6, 101)`)
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	waitFor(t, "the slot to confirm everything", time.Minute, func() bool {
		return confirmedFlush(t, db, "walcast_kdbzkey") >= end
	})

	mirror := map[int]int{}
	newKeys, oldKeys := 0, 0
	for _, r := range readKcat(t, addr, kafkaTopic) {
		if r.Value == nil {
			continue // a tombstone
		}
		var v struct {
			Payload struct {
				Before, After map[string]any
				Op            string
			}
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("offset %d: %v: %s", r.Offset, err, r.Value)
		}
		p := v.Payload
		switch p.Op {
		case "c", "r", "u":
			mirror[int(p.After["id"].(float64))] = int(p.After["v"].(float64))
		case "d":
			delete(mirror, int(p.Before["id"].(float64)))
		}
		if r.Headers["__debezium.newkey"] != "" {
			newKeys++
			if p.Op != "d" {
				t.Errorf("offset %d: __debezium.newkey on a %q record", r.Offset, p.Op)
			}
		}
		if k := r.Headers["__debezium.oldkey"]; k != "" {
			oldKeys++
			var key struct{ Payload map[string]any }
			if p.Op != "c" || json.Unmarshal([]byte(k), &key) != nil || int(key.Payload["id"].(float64))+100 != int(p.After["id"].(float64)) {
				t.Errorf("offset %d: %q record with __debezium.oldkey %s", r.Offset, p.Op, k)
			}
		}
	}
	if newKeys != 5 || oldKeys != 5 {
		t.Errorf("%d deletes with __debezium.newkey and %d creates with __debezium.oldkey, want 5 each", newKeys, oldKeys)
	}
	if want := tableRows(t, db, "public.items"); !maps.Equal(mirror, want) {
		t.Errorf("mirror %v, table %v", mirror, want)
	}
}
