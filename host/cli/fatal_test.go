package cli

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestFatalRunErrorPrintedOnce: two pipelines sharing a Kafka
// transactional id fence each other. The fenced one cannot go on
// (pluginkit.Fatal): walcast run stops with exit 1 and prints the error
// once, with its cause.
func TestFatalRunErrorPrintedOnce(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	addr := startKafka(t)
	cfg := kafkaConfig(addr, true, "walcast-shared")
	first := startWalcast(t, writePipeline(t, "fatal_a", dsn, []string{"public.items"}, sinkSpec{ID: "kafka", SinkType: "kafka", Config: cfg}))
	first.waitLog(t, "streaming from slot")
	exec1(t, db, `INSERT INTO items VALUES (1, 0, 'a')`)
	first.waitLog(t, "kafka connected")
	// The second pipeline claims the same transactional id, fencing the
	// first, which learns it on its next transaction.
	second := startWalcast(t, writePipeline(t, "fatal_b", dsn, []string{"public.items"}, sinkSpec{ID: "kafka", SinkType: "kafka", Config: cfg}))
	second.waitLog(t, "streaming from slot")
	exec1(t, db, `INSERT INTO items VALUES (2, 0, 'b')`)
	first.waitExit1(t, 2*time.Minute, "its Kafka producer was fenced")
	b, _ := os.ReadFile(first.log)
	out := string(b)
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "sink cannot go on") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "walcast run: sink kafka: sink cannot go on") || !strings.Contains(lines[0], "fenced") {
		t.Fatalf("the fatal error appears %d times, want once with its cause:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	second.stop()
}
