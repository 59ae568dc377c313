package cli

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestTeardownSaysWhatItDid: while walcast runs, teardown refuses and
// names the walcast run that holds the slot (its own pid, not only the
// walsender's); stopped, its dry run lists everything --yes drops (the
// slot, a paused sink's catch-up slot, both publications, the rows) and
// what it leaves (the walcast schema, a kafka sink's topics and
// checkpoint topic); --yes then reports exactly that, and the database
// holds none of it.
func TestTeardownSaysWhatItDid(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v text)`)
	a, b := newReceiver(t), newReceiver(t)
	p := writePipeline(t, "td", dsn, []string{"public.items"}, sinkSpec{ID: "a", URL: a.URL}, sinkSpec{ID: "b", URL: b.URL})
	w := startWalcast(t, p)
	w.waitLog(t, "streaming from slot")
	if out, err := walcastCLI(t, "pause", p, "--sink", "b"); err != nil {
		t.Fatalf("walcast pause: %v\n%s", err, out)
	}
	exec1(t, db, `INSERT INTO items SELECT g, 'x' FROM generate_series(1, 5) g`)
	waitFor(t, "sink b detached onto a catch-up slot", time.Minute, func() bool { return len(catchupSlots(t, db, "walcast_td")) == 1 })
	waitFor(t, "sink a's deliveries", time.Minute, func() bool { return a.distinct() >= 5 })

	out, code := walcastOut(t, "teardown", p, "--yes")
	if code != 1 || !strings.Contains(out, holderName(w)+", which leads pipeline \"td\"") || !strings.Contains(out, "stop that walcast run first") {
		t.Errorf("teardown while walcast runs: exit %d; want 1 and the walcast run named (%s):\n%s", code, holderName(w), out)
	}
	if slotCount(t, db, "walcast_td") != 1 {
		t.Fatal("teardown dropped the slot of a running walcast")
	}
	w.stop()
	waitSlotReleased(t, db, "walcast_td")
	cu := catchupSlots(t, db, "walcast_td")
	if len(cu) != 1 {
		t.Fatalf("catch-up slots after the stop: %v, want the paused sink's", cu)
	}
	// Whether the paused sink got a checkpoint of its own before it was
	// paused is a race; teardown must count what is there.
	cps := queryInt(t, db, `SELECT count(*) FROM walcast.checkpoints WHERE pipeline = 'td'`)

	// The same pipeline, with a kafka sink added: teardown names the
	// topics it leaves (no broker is contacted).
	withKafka := strings.Replace(readFile(t, p), `sink "webhook" "b"`, "sink \"kafka\" \"stream\" {\n  config {\n    brokers = [\"127.0.0.1:1\"]\n  }\n}\n\nsink \"webhook\" \"b\"", 1)
	if err := os.WriteFile(p, []byte(withKafka), 0o644); err != nil {
		t.Fatal(err)
	}
	_, dry, code := walcastCmd(t, "teardown", p)
	if code != 1 {
		t.Fatalf("dry run: exit %d\n%s", code, dry)
	}
	wantAll(t, dry, `replication slot "walcast_td" (confirmed up to `, fmt.Sprintf("catch-up slot %q", cu[0]),
		`publication "walcast_td" (walcast created it)`, `publication "walcast_td_keyless" (walcast created it)`,
		fmt.Sprintf("the pipeline's rows in the walcast schema: %d checkpoint(s), 0 parked event(s)", cps),
		"It would leave:", "the walcast schema itself",
		"the Kafka topics of sink stream: topics public.items → walcast.public.items; checkpoint topic walcast.checkpoints (record walcast-stream)")

	done, err := walcastCLI(t, "teardown", p, "--yes")
	if err != nil {
		t.Fatalf("teardown --yes: %v\n%s", err, done)
	}
	wantAll(t, done, fmt.Sprintf("dropped catch-up slot %q", cu[0]), `dropped replication slot "walcast_td"`,
		`dropped publication "walcast_td"`, `dropped publication "walcast_td_keyless"`, fmt.Sprintf("deleted the pipeline's rows in the walcast schema (%d checkpoint(s)", cps),
		"walcast.public.items")
	if n := queryInt(t, db, `SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'walcast_td%'`); n != 0 {
		t.Errorf("%d slots of the pipeline left after teardown", n)
	}
	if n := queryInt(t, db, `SELECT count(*) FROM pg_publication WHERE pubname LIKE 'walcast_td%'`); n != 0 {
		t.Errorf("%d publications of the pipeline left after teardown", n)
	}
	if n := queryInt(t, db, `SELECT count(*) FROM walcast.checkpoints WHERE pipeline = 'td'`) + queryInt(t, db, `SELECT count(*) FROM walcast.pipelines WHERE pipeline = 'td'`); n != 0 {
		t.Errorf("%d rows of the pipeline left after teardown", n)
	}
}
