package cli

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestKafkaTombstonesAndTopicNames, end to end: tables whose names Kafka
// would refuse as topics (a space, a non-ASCII letter) are captured into
// the mapped topics, and a read_committed librdkafka consumer (kcat -Z)
// sees Debezium-style tombstones after a delete and a delete plus
// tombstone for the old key of an update that changed the key.
func TestKafkaTombstonesAndTopicNames(t *testing.T) {
	needKcat(t)
	addr := startKafka(t)
	dsn, db := newSource(t,
		`CREATE TABLE "order items" (id int PRIMARY KEY, v int NOT NULL)`,
		`CREATE TABLE café (id int PRIMARY KEY, v int NOT NULL)`,
	)
	pipeline := writePipeline(t, "kedges", dsn, []string{"public.order items", "public.café"},
		sinkSpec{ID: "k", SinkType: "kafka", Config: kafkaConfig(addr, true, "walcast-kedges")})
	out, err := walcastCLI(t, "validate", pipeline, "--plugin-dir", binDir)
	if err != nil {
		t.Fatalf("walcast validate: %v\n%s", err, out)
	}
	proc := startCapturing(t, db, pipeline)

	exec1(t, db, `INSERT INTO "order items" VALUES (1, 0), (2, 0)`)
	exec1(t, db, `UPDATE "order items" SET id = 3 WHERE id = 1`)
	exec1(t, db, `DELETE FROM "order items" WHERE id = 2`)
	exec1(t, db, `INSERT INTO café VALUES (1, 0)`)
	exec1(t, db, `DELETE FROM café WHERE id = 1`)

	// key -> what each record under it is, in log order.
	byKey := func(topic string) map[string][]string {
		out := map[string][]string{}
		for _, r := range readKcat(t, addr, topic, "-Z") {
			what := r.Headers["walcast-op"]
			if d := r.Headers["walcast-derived"]; d != "" {
				what = d
			}
			if r.Value == nil {
				what += "=null"
			}
			out[string(r.Key)] = append(out[string(r.Key)], what)
		}
		return out
	}
	count := func(m map[string][]string) (n int) {
		for _, v := range m {
			n += len(v)
		}
		return n
	}
	adm := kadm.NewClient(kafkaClient(t, addr))
	waitFor(t, "both topics", 2*time.Minute, func() bool {
		return highWatermarks(t.Context(), adm, "walcast.public.order_items") > 0 && highWatermarks(t.Context(), adm, "walcast.public.caf_") > 0
	})
	var items, cafe map[string][]string
	waitFor(t, "10 records in the two topics", 2*time.Minute, func() bool {
		items, cafe = byKey("walcast.public.order_items"), byKey("walcast.public.caf_")
		return count(items) >= 7 && count(cafe) >= 3
	})
	proc.stop()
	want := map[string]map[string][]string{
		"walcast.public.order_items": {
			`{"id":1}`: {"insert", "old-key-delete", "tombstone=null"},
			`{"id":3}`: {"update"},
			`{"id":2}`: {"insert", "delete", "tombstone=null"},
		},
		"walcast.public.caf_": {`{"id":1}`: {"insert", "delete", "tombstone=null"}},
	}
	for topic, got := range map[string]map[string][]string{"walcast.public.order_items": items, "walcast.public.caf_": cafe} {
		if fmt.Sprint(got) != fmt.Sprint(want[topic]) {
			t.Errorf("%s as kcat -Z reads it: %v, want %v", topic, got, want[topic])
		}
		for k, v := range got {
			t.Logf("kcat -Z %s key %s: %s", topic, k, strings.Join(v, ", "))
		}
	}
}
