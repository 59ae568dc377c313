package cli

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

// TestRabbitMQ runs the rabbitmq sink's end-to-end checks against one
// broker (see amqp_server_test.go); the check that restarts the broker
// goes last.
func TestRabbitMQ(t *testing.T) {
	parallel(t)
	needRabbit(t)
	b := startRabbit(t)
	t.Run("CrashLoop", func(t *testing.T) { rabbitCrashLoop(t, b) })
	t.Run("TooLarge", func(t *testing.T) { rabbitTooLarge(t, b) })
	t.Run("AuthRefused", func(t *testing.T) { rabbitAuthRefused(t, b) })
	t.Run("BrokerDownAndRestarted", func(t *testing.T) { rabbitBrokerRestarts(t, b) })
}

// verifyItems compares the events read from the queue with test_decoding's
// truth: every committed change arrived, with its op and key; nothing
// else did; every copy of an id is byte-identical; the first copies of
// each row's changes are in commit order. It returns the duplicates.
func verifyItems(t testing.TB, want []tdItem, got []received) (dups int) {
	t.Helper()
	type at struct {
		xid uint32
		idx uint64
	}
	expect := make(map[at]tdItem, len(want))
	for _, c := range want {
		expect[at{c.xid, uint64(c.idx)}] = c
	}
	first := map[at]received{}
	last := map[string]pluginkit.EventID{}
	for _, r := range got {
		k := at{r.Xid, r.ID.Index}
		c, ok := expect[k]
		if !ok {
			t.Fatalf("received %s (xid %d %s %s) that is not a committed change", r.ID, r.Xid, r.Op, r.Key)
		}
		wantKey := `{"id":` + c.id + `}`
		if c.op == "truncate" {
			wantKey = "null"
		}
		if r.Op != c.op || r.Key != wantKey {
			t.Fatalf("event %s: %s key %s, committed was %s key %s", r.ID, r.Op, r.Key, c.op, wantKey)
		}
		if f, ok := first[k]; ok {
			dups++
			if !bytes.Equal(f.Raw, r.Raw) {
				t.Fatalf("event %s arrived twice with different bytes:\n%s\n%s", r.ID, f.Raw, r.Raw)
			}
			continue
		}
		first[k] = r
		if prev, ok := last[r.Key]; ok && r.Key != "null" && r.ID.Compare(prev) <= 0 {
			t.Fatalf("row %s: %s arrived first after %s", r.Key, r.ID, prev)
		}
		last[r.Key] = r.ID
	}
	if len(first) != len(want) {
		for _, c := range want {
			if _, ok := first[at{c.xid, uint64(c.idx)}]; !ok {
				t.Errorf("missing: xid %d change %d (%s id %s)", c.xid, c.idx, c.op, c.id)
				break
			}
		}
		t.Fatalf("%d of %d committed changes arrived", len(first), len(want))
	}
	return dups
}

// rabbitCrashLoop: walcast is SIGKILLed five times (WALCAST_CHAOS scales
// it) while writers insert, update, delete, change keys and truncate;
// afterwards pika drains the queue: every committed change is there, the
// duplicates (at-least-once: batches confirmed by the broker but not yet
// acknowledged in walcast when it died) are byte-identical copies.
func rabbitCrashLoop(t *testing.T, b *rabbitBroker) {
	ctx := context.Background()
	name := "rmqcrash"
	dsn, db := newSource(t, pgItems)
	truthSlot(t, dsn, db, "truth_"+name)
	depth := b.queue(t, "crash", "crash-items", "public.items")
	pipeline := writePipeline(t, name, dsn, []string{"public.items"},
		sinkSpec{ID: "rabbit", SinkType: "rabbitmq", Batch: 50, Config: b.rabbitConfig("crash")})
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 7))
	wdb := connect(t, dsn)
	proc := startCapturing(t, db, pipeline)
	const changes = 12000
	workDone := make(chan error, 1)
	var worked atomic.Bool
	go func() {
		err := itemsWorkload(ctx, wdb, rand.New(rand.NewPCG(seed, 8)), changes)
		worked.Store(true)
		workDone <- err
	}()
	proc, _ = crashLoop(t, db, name, pipeline, proc, r, changes, &worked, depth, func(kill int) {
		t.Logf("kill %d: walcast SIGKILLed at %d messages in the queue", kill, depth())
	})
	if err := <-workDone; err != nil {
		t.Fatal(err)
	}
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	waitFor(t, "slot to confirm the workload", 3*time.Minute, func() bool { return confirmedFlush(t, db, "walcast_"+name) >= end })
	proc.stop()
	msgs := b.drain(t, "crash-items")
	want := itemTruth(t, db, "truth_"+name)
	dups := verifyItems(t, want, asEvents(t, msgs))
	t.Logf("%d committed changes, %d messages read by pika: nothing lost, %d duplicates (byte-identical, at-least-once)", len(want), len(msgs), dups)
}

// rabbitTooLarge: a row whose envelope exceeds the broker's
// max_message_size. The broker closes the channel over it; the sink learns
// the limit from the broker's answer and parks that event alone, naming
// the sizes; the rows around it arrive.
func rabbitTooLarge(t *testing.T, b *rabbitBroker) {
	name := "rmqlarge"
	dsn, db := newSource(t, pgItems)
	b.queue(t, "large", "large-items", "public.items")
	pipeline := writePipeline(t, name, dsn, []string{"public.items"},
		sinkSpec{ID: "rabbit", SinkType: "rabbitmq", Config: b.rabbitConfig("large")})
	proc := startCapturing(t, db, pipeline)
	exec1(t, db, `INSERT INTO items (id, v, pad) VALUES (1, 0, 'a'), (2, 0, repeat('x', $1::int)), (3, 0, 'c')`, 2*rabbitMaxMessage)
	waitFor(t, "the large row to be parked", time.Minute, func() bool { return parkedCount(db, name) == 1 })
	errs := parkedErrors(t, db, name)["rabbit"]
	if len(errs) != 1 || !strings.Contains(errs[0], fmt.Sprintf("more than the %d a message may have", rabbitMaxMessage)) {
		t.Fatalf("parked: %q, want the broker's size limit named", errs)
	}
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	waitFor(t, "the other rows", time.Minute, func() bool { return confirmedFlush(t, db, "walcast_"+name) >= end })
	proc.stop()
	got := map[string]int{}
	for _, e := range asEvents(t, b.drain(t, "large-items")) {
		got[e.Key]++
	}
	if got[`{"id":1}`] == 0 || got[`{"id":3}`] != 1 || got[`{"id":2}`] != 0 {
		t.Fatalf("arrived %v, want rows 1 and 3 (1 perhaps twice: it was published before the broker closed the channel), not 2", got)
	}
	wantAll(t, proc.logText(), "the broker refuses messages above its max_message_size")
}

// rabbitAuthRefused: wrong credentials stop walcast at start, naming the
// user, before anything streams.
func rabbitAuthRefused(t *testing.T, b *rabbitBroker) {
	dsn, db := newSource(t, pgItems)
	pipeline := writePipeline(t, "rmqauth", dsn, []string{"public.items"},
		sinkSpec{ID: "rabbit", SinkType: "rabbitmq", Config: b.rabbitConfig("auth") + "    password = \"wrong\"\n"})
	proc := startWalcast(t, pipeline)
	proc.waitExit1(t, time.Minute, "the broker refused the password")
	wantAll(t, proc.logText(), `refused user "guest"`, "username or password not allowed")
	if n := slotCount(t, db, "walcast_rmqauth"); n != 0 {
		t.Errorf("the refused start left %d slots", n)
	}
}

// rabbitBrokerRestarts: the broker SIGKILLed mid-stream, and while it is
// down walcast SIGKILLed and started again, so that it starts with the
// broker down (it runs and retries; nothing stops it); the broker then
// comes back on its data. Every message it had confirmed survived
// (persistent, durable queue), the rest were published again: nothing is
// lost. One broker restart covers both cases: it is slow to boot.
func rabbitBrokerRestarts(t *testing.T, b *rabbitBroker) {
	name := "rmqrestart"
	dsn, db := newSource(t, pgItems)
	truthSlot(t, dsn, db, "truth_"+name)
	depth := b.queue(t, "restart", "restart-items", "public.items")
	pipeline := writePipeline(t, name, dsn, []string{"public.items"}, sinkSpec{ID: "rabbit", SinkType: "rabbitmq",
		Extra: "    max_attempts = 1000\n", Config: b.rabbitConfig("restart")})
	proc := startCapturing(t, db, pipeline)
	exec1(t, db, `INSERT INTO items (id, v) SELECT g, 0 FROM generate_series(1, 100) g`)
	waitFor(t, "the first rows", time.Minute, func() bool { return depth() >= 100 })

	done := make(chan struct{})
	go func() {
		defer close(done)
		wdb := connect(t, dsn)
		for i := range 600 {
			if _, err := wdb.Exec(context.Background(), `UPDATE items SET v = v + 1 WHERE id = $1`, 1+i%100); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	waitFor(t, "updates to flow", time.Minute, func() bool { return depth() > 150 })
	b.kill()
	t.Logf("broker SIGKILLed mid-stream")
	waitFor(t, "walcast to see the broker gone", time.Minute, func() bool {
		return strings.Contains(proc.logText(), "closed") || strings.Contains(proc.logText(), "cannot be reached")
	})
	proc.kill()
	proc = startWalcast(t, pipeline)
	proc.waitLog(t, "broker unreachable at start")
	<-done
	proc.waitLog(t, "cannot be reached")
	b.start(t)
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	waitFor(t, "slot to confirm every change", 3*time.Minute, func() bool { return confirmedFlush(t, db, "walcast_"+name) >= end })
	proc.stop()
	want := itemTruth(t, db, "truth_"+name)
	msgs := b.drain(t, "restart-items")
	dups := verifyItems(t, want, asEvents(t, msgs))
	t.Logf("%d committed changes across a broker crash and a walcast started while it was down: %d messages, nothing lost, %d duplicates", len(want), len(msgs), dups)
}
