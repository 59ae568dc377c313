package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestBackfillBench measures a backfill of the bench table to the stdout
// sink (writing to a file), first alone (rows/s, WAL per row, row lock time
// per chunk), then again while a writer commits live changes that a webhook
// sink receives (their commit→sink latency). It is a measurement, not a
// check: it runs only with WALCAST_BACKFILL_BENCH=<rows>, e.g.
//
//	WALCAST_BACKFILL_BENCH=1000000 go test -run TestBackfillBench -v -timeout 30m ./host/cli/
func TestBackfillBench(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("WALCAST_BACKFILL_BENCH"))
	if n <= 0 {
		t.Skip("set WALCAST_BACKFILL_BENCH=<rows> to run the backfill measurement")
	}
	ctx := context.Background()
	dsn := cluster.Database(t)
	db := connect(t, dsn)
	exec1(t, db, `CREATE TABLE bench (id bigint PRIMARY KEY, account int, name text, amount numeric(12,2), payload text, updated_at timestamptz)`)
	exec1(t, db, `INSERT INTO bench SELECT g, (g % 1000)::int, 'customer-' || g, (g % 100000) / 100.0,
  md5(g::text) || md5((g + 1)::text), now() FROM generate_series(1, $1::bigint) g`, n)
	exec1(t, db, `CREATE TABLE live (id bigint PRIMARY KEY, v int)`)
	exec1(t, db, `VACUUM ANALYZE bench`)
	rcv := newReceiver(t)
	out := filepath.Join(t.TempDir(), "events.jsonl")
	pipeline := writePipeline(t, "bfbench", dsn, []string{"public.bench", "public.live"},
		sinkSpec{ID: "out", SinkType: "stdout", Batch: 1000, Config: fmt.Sprintf("    path = %q\n", out)},
		sinkSpec{ID: "hook", URL: rcv.URL, Batch: 100})
	proc := startWalcast(t, pipeline)
	waitSlot(t, db, "walcast_bfbench")
	doneRe := regexp.MustCompile(`msg="backfill done".* rows=(\d+) chunks=(\d+) rows_per_s=(\d+) lock_avg=(\S+) lock_max=(\S+)`)
	run := func(live bool) {
		var liveDone chan int
		stop := make(chan struct{})
		if live {
			liveDone = make(chan int, 1)
			wdb := connect(t, dsn)
			go func() {
				i := 0
				tick := time.NewTicker(5 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						liveDone <- i
						return
					case <-tick.C:
					}
					i++
					if _, err := wdb.Exec(ctx, `INSERT INTO live VALUES ($1, 0)`, i); err != nil {
						liveDone <- i
						return
					}
				}
			}()
		}
		before := lsnQuery(t, db, `SELECT pg_current_wal_insert_lsn()::text`)
		start := time.Now()
		id := requestBackfill(t, db, pipeline, "--table", "public.bench", "--sink", "out")
		waitFor(t, "backfill", 30*time.Minute, func() bool { s, _, _ := backfillState(t, db, id); return s == "done" })
		took := time.Since(start)
		after := lsnQuery(t, db, `SELECT pg_current_wal_insert_lsn()::text`)
		if live {
			close(stop)
			<-liveDone
		}
		m := doneRe.FindAllStringSubmatch(proc.logText(), -1)
		last := m[len(m)-1]
		t.Logf("live=%v: %s rows in %s chunks, %.0f rows/s wall (runner %s rows/s), lock per chunk avg %s max %s, WAL %.0f bytes/row",
			live, last[1], last[2], float64(n)/took.Seconds(), last[3], last[4], last[5], float64(after-before)/float64(n))
		if live {
			var lat []time.Duration
			times := rcv.arrivalTimes()
			for i, e := range rcv.events() {
				var env struct {
					CommitTime time.Time `json:"commit_time"`
				}
				json.Unmarshal(e.Raw, &env)
				lat = append(lat, times[i].Sub(env.CommitTime))
			}
			slices.Sort(lat)
			if len(lat) > 0 {
				t.Logf("live changes during the backfill: %d, commit→sink latency p50 %s p99 %s max %s",
					len(lat), lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1])
			}
		}
	}
	run(false)
	run(true)
	proc.stop()
}
