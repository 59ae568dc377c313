package cli

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestPlanKafkaTopicsAreTheSinks: the topics walcast validate --source
// names for a kafka sink (derived names with the characters Kafka refuses
// mapped, an override, the checkpoint topic) are exactly the topics the
// sink then writes to a broker. The plan names them without the plugin
// (host/cli kafkatopics.go mirrors plugins/kafka topicname.go): this is
// what keeps the two in step.
func TestPlanKafkaTopicsAreTheSinks(t *testing.T) {
	addr := startKafka(t)
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY)`, `CREATE TABLE "café" (id int PRIMARY KEY)`, `CREATE TABLE orders (id int PRIMARY KEY)`)
	cfg := kafkaConfig(addr, true, "walcast-plan-topics") + "    topic_prefix = \"shop\"\n    topics = { \"public.orders\" = \"orders-v2\" }\n"
	p := writePipeline(t, "plan_kafka", dsn, []string{"public.items", "public.café", "public.orders"}, sinkSpec{ID: "k", SinkType: "kafka", Config: cfg})
	stdout, stderr, code := runPlan(t, p)
	if code != 0 {
		t.Fatalf("validate --source: exit %d\n%s%s", code, stdout, stderr)
	}
	want := []string{"orders-v2", "shop.public.caf_", "shop.public.items", "walcast.checkpoints"}
	wantAll(t, stdout, "topics public.items → shop.public.items, public.café → shop.public.caf_, public.orders → orders-v2; checkpoint topic walcast.checkpoints (record walcast-plan-topics)")

	w := startWalcast(t, p)
	w.waitLog(t, "streaming from slot")
	exec1(t, db, `INSERT INTO items VALUES (1); INSERT INTO "café" VALUES (1); INSERT INTO orders VALUES (1)`)
	adm := kadm.NewClient(kafkaClient(t, addr))
	var got []string
	waitFor(t, "the sink's topics on the broker", time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		topics, err := adm.ListTopics(ctx)
		if err != nil {
			return false
		}
		got = nil
		for _, name := range topics.Names() {
			if !strings.HasPrefix(name, "__") {
				got = append(got, name)
			}
		}
		slices.Sort(got)
		return len(got) >= len(want) && highWatermarks(ctx, adm, "orders-v2") > 0
	})
	if !slices.Equal(got, want) {
		t.Errorf("the plan named topics %v; the sink wrote %v", want, got)
	}
	w.stop()
}
