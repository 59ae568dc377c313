package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walcast/walcast/host/pgtest"
	"github.com/walcast/walcast/pluginkit"
)

// kafkaLoop describes one crash loop against the Kafka sink.
type kafkaLoop struct {
	eos        bool
	killPlugin bool // SIGKILL the sink's plugin process instead of walcast
	kills      int
	top        string // more lines at the top of the sink block (format)
}

// kafkaLoopResult is what a crash loop leaves behind for the checks.
type kafkaLoopResult struct {
	addr  string
	want  []change
	logs  string    // every walcast process's log, concatenated
	ahead int       // kills at which Kafka's checkpoint was ahead of walcast.checkpoints
	db    *pgx.Conn // the source database, for mirrors
}

const kafkaTopic = "walcast.public.items"

// kafkaBatch is smaller than the default 100: many more transactions,
// hence more kills that land inside one, and delivery slow enough that the
// kills spread over the whole workload.
const kafkaBatch = 20

// runKafkaCrashLoop streams a 20,000+ change workload through the Kafka
// sink while killing walcast (or its plugin) lc.kills times at random
// points, then waits until the slot has confirmed everything and stops
// walcast cleanly. The checks are the caller's.
func runKafkaCrashLoop(t *testing.T, name string, lc kafkaLoop) kafkaLoopResult {
	ctx := context.Background()
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	truthSlot(t, dsn, db, "truth_"+name)
	addr := startKafka(t)
	// Progress polling must notice the topic as soon as it appears.
	adm := kadm.NewClient(kafkaClient(t, addr, kgo.MetadataMinAge(10*time.Millisecond), kgo.MetadataMaxAge(100*time.Millisecond)))
	txnID := "walcast-" + name
	pipeline := writePipeline(t, name, dsn, []string{"public.items"}, sinkSpec{
		ID: "kafka", SinkType: "kafka", Batch: kafkaBatch, Config: kafkaConfig(addr, lc.eos, txnID), Top: lc.top,
	})

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 7))
	wdb := connect(t, dsn)
	var logs []*walcastProc
	proc := startWalcast(t, pipeline)
	logs = append(logs, proc)
	waitSlot(t, db, "walcast_"+name)
	workDone := make(chan error, 1)
	var worked atomic.Bool
	go func() {
		_, err := workload(ctx, wdb, rand.New(rand.NewPCG(seed, 8)), 20000)
		worked.Store(true)
		workDone <- err
	}()

	res := kafkaLoopResult{addr: addr, db: db}
	begin := time.Now()
	var workEnd uint64 // the WAL's end once the workload has committed everything
	for kill := 1; kill <= lc.kills; kill++ {
		// Kill at a random point while records are being produced: the
		// slot holds far more than these few thousand events, so every
		// kill interrupts real work — often with a transaction open, or
		// committed in Kafka but not yet in walcast.checkpoints.
		// The kills are spread over the ~20,000 records the workload
		// makes, so that each one still finds a backlog to deliver.
		target := highWatermarks(ctx, adm, kafkaTopic) + 1 + int64(r.IntN(20000/(lc.kills+1)))
		// On a slow machine the workload may end, and walcast deliver all
		// of it, before the target is reached: then there is nothing left
		// to interrupt (the slot has confirmed the workload's end), and
		// the remaining kills are skipped (at least two must have landed,
		// checked below).
		drained := false
		waitFor(t, "records before kill", 2*time.Minute, func() bool {
			if worked.Load() && workEnd == 0 {
				workEnd = lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
			}
			drained = workEnd != 0 && confirmedFlush(t, db, "walcast_"+name) >= workEnd
			return highWatermarks(ctx, adm, kafkaTopic) >= target || drained
		})
		if drained {
			if kill <= 2 {
				t.Fatalf("the workload was delivered whole after %d kills; the loop needs at least 2 mid-stream", kill-1)
			}
			t.Logf("workload delivered whole after %d kills; skipping the rest", kill-1)
			break
		}
		if r.IntN(2) == 0 {
			// A random point, not a synchronisation: sometimes let a
			// checkpoint write happen first.
			time.Sleep(time.Duration(r.IntN(300)) * time.Millisecond)
		}
		if lc.killPlugin {
			children := childPIDs(proc.cmd.Process.Pid)
			if len(children) == 0 {
				t.Fatalf("kill %d: walcast has no plugin process", kill)
			}
			for _, pid := range children {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Logf("kill %d: plugin pid %v SIGKILLed at %d records written", kill, children, highWatermarks(ctx, adm, kafkaTopic))
			continue
		}
		proc.kill()
		var host string
		db.QueryRow(ctx, `SELECT coalesce(max(event_id), '') FROM walcast.checkpoints WHERE sink = 'kafka'`).Scan(&host)
		line := fmt.Sprintf("kill %d (%s): walcast SIGKILLed at %d records written; walcast.checkpoints %q", kill, time.Since(begin).Round(time.Millisecond), highWatermarks(ctx, adm, kafkaTopic), host)
		proc = startWalcast(t, pipeline)
		logs = append(logs, proc)
		if lc.eos {
			// The checkpoint as the restarted sink reads it back after
			// fencing its predecessor: what Kafka had committed. (Reading
			// it read_committed before the restart would wait for the
			// transaction the kill left open to time out.)
			kcp := openCheckpoint(t, proc)
			hostID, _ := pluginkit.ParseEventID(host) // zero when there is no row yet
			if kcp.Compare(hostID) > 0 {
				res.ahead++
				line += fmt.Sprintf("; Kafka checkpoint %s is ahead: committed in Kafka, ack not recorded", kcp)
			}
		}
		t.Log(line)
	}
	if err := <-workDone; err != nil {
		t.Fatal(err)
	}
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	res.want = truth(t, db, "truth_"+name, map[string]bool{"public.items": true})
	if len(res.want) < 20000 {
		t.Fatalf("workload committed only %d changes", len(res.want))
	}
	// Everything committed before end is acknowledged by the sink once the
	// slot's confirmed position passes it.
	waitFor(t, fmt.Sprintf("slot to confirm all %d changes", len(res.want)), 3*time.Minute, func() bool {
		return confirmedFlush(t, db, "walcast_"+name) >= end
	})
	proc.stop()
	for _, p := range logs {
		res.logs += p.logText()
	}
	return res
}

var connectedLine = regexp.MustCompile(`msg="kafka connected".* checkpoint=(\S+)`)

// openCheckpoint waits for the sink in a freshly started walcast to connect
// and returns the checkpoint it read back from Kafka.
func openCheckpoint(t *testing.T, p *walcastProc) pluginkit.EventID {
	t.Helper()
	p.waitLog(t, `msg="kafka connected"`)
	m := connectedLine.FindStringSubmatch(p.logText())
	if m == nil {
		t.Fatalf("no checkpoint in the sink's connect line:\n%s", tail(p.logText(), 20))
	}
	id, err := pluginkit.ParseEventID(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return id
}

var skippedLine = regexp.MustCompile(`msg="skipped events already committed to Kafka".* duplicates=(\d+)`)

// sinkDuplicates sums the events the sink filtered as already committed
// (DeliverResult.Duplicates), as its log lines report them.
func sinkDuplicates(logs string) int {
	n := 0
	for _, m := range skippedLine.FindAllStringSubmatch(logs, -1) {
		d, _ := strconv.Atoi(m[1])
		n += d
	}
	return n
}

// TestKafkaCrashLoopExactlyOnce is the Kafka sink's promise under host
// crashes: walcast is SIGKILLed five times while 20,000+ changes stream
// into Kafka — with transactions open, and between a commit in Kafka and
// walcast recording the ack — and afterwards two independent read_committed
// consumers (franz-go, and librdkafka through kcat) each see every
// committed change exactly once, byte-identical, in per-row order. A
// read_uncommitted reader of the same topic does see duplicates: the
// records of the transactions the kills aborted.
func TestKafkaCrashLoopExactlyOnce(t *testing.T) {
	parallel(t)
	needKcat(t)
	start := time.Now()
	res := runKafkaCrashLoop(t, "kcrash", kafkaLoop{eos: true, kills: pgtest.Chaos(t, 5)})
	if res.ahead == 0 {
		t.Errorf("no kill landed between a Kafka commit and walcast recording its ack; the loop did not test what it claims")
	}
	checkExactlyOnce(t, res)
	t.Logf("%d changes, 5 host SIGKILLs (%d with Kafka ahead of walcast.checkpoints), %d redelivered events filtered by the sink, in %s",
		len(res.want), res.ahead, sinkDuplicates(res.logs), time.Since(start).Round(time.Second))
}

// TestKafkaPluginCrashLoopExactlyOnce: the same promise when the sink's
// plugin process is SIGKILLed five times instead. The host restarts it and
// delivers the interrupted batch again; the new process reads the
// checkpoint back and filters what the killed one had committed.
func TestKafkaPluginCrashLoopExactlyOnce(t *testing.T) {
	parallel(t)
	needKcat(t)
	start := time.Now()
	res := runKafkaCrashLoop(t, "kplug", kafkaLoop{eos: true, killPlugin: true, kills: pgtest.Chaos(t, 5)})
	checkExactlyOnce(t, res)
	t.Logf("%d changes, 5 plugin SIGKILLs, %d redelivered events filtered by the sink as already committed, in %s",
		len(res.want), sinkDuplicates(res.logs), time.Since(start).Round(time.Second))
}

// checkExactlyOnce reads the topic three ways and checks each reader.
func checkExactlyOnce(t *testing.T, res kafkaLoopResult) {
	t.Helper()
	committed := readKafka(t, res.addr, kafkaTopic, kgo.ReadCommitted())
	if dups := verify(t, res.want, asReceived(t, committed)); dups != 0 {
		t.Errorf("franz-go read_committed consumer saw %d duplicates, want none", dups)
	}
	kc := readKcat(t, res.addr, kafkaTopic)
	if dups := verify(t, res.want, asReceived(t, kc)); dups != 0 {
		t.Errorf("kcat read_committed consumer saw %d duplicates, want none", dups)
	}
	uncommitted := readKafka(t, res.addr, kafkaTopic, kgo.ReadUncommitted())
	udups := verify(t, res.want, asReceived(t, uncommitted))
	t.Logf("read_committed: franz-go %d records, kcat %d records, 0 duplicates; read_uncommitted: %d records, %d duplicates (aborted transactions)",
		len(committed), len(kc), len(uncommitted), udups)
}

// TestKafkaAtLeastOnceWithoutEOS: with eos = false the sink is an
// idempotent, non-transactional producer. Across the same crash loop
// nothing is lost, and the batches walcast redelivers after a crash land
// again: duplicates a consumer removes by event id.
func TestKafkaAtLeastOnceWithoutEOS(t *testing.T) {
	parallel(t)
	start := time.Now()
	res := runKafkaCrashLoop(t, "kalo", kafkaLoop{eos: false, kills: 5})
	got := readKafka(t, res.addr, kafkaTopic, kgo.ReadCommitted())
	dups := verify(t, res.want, asReceived(t, got))
	t.Logf("%d changes, 5 host SIGKILLs: %d records, %d duplicates (at-least-once), in %s",
		len(res.want), len(got), dups, time.Since(start).Round(time.Second))
}
