package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walcast/walcast/host/pgtest"
)

// partitionedItems is a table partitioned by key range, n rows in each of
// four partitions (ids p*100000+1 … p*100000+n), and a standalone table
// holding n rows of the range a fifth partition would cover.
func partitionedItems(n int) []string {
	setup := []string{`CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text) PARTITION BY RANGE (id)`}
	for p := 0; p < 4; p++ {
		setup = append(setup,
			fmt.Sprintf(`CREATE TABLE items_p%d PARTITION OF items FOR VALUES FROM (%d) TO (%d)`, p, p*100000, (p+1)*100000),
			fmt.Sprintf(`INSERT INTO items SELECT g, 0, 'old' FROM generate_series(%d, %d) g`, p*100000+1, p*100000+n))
	}
	return append(setup, `CREATE TABLE items_p4 (id int PRIMARY KEY, v int NOT NULL, pad text)`,
		fmt.Sprintf(`INSERT INTO items_p4 SELECT g, 7, 'attached' FROM generate_series(400001, %d) g`, 400000+n))
}

// startPartitionWriters writes to items until stopped: inserts, updates,
// deletes and key changes in partition p0, and updates and deletes of
// rows anywhere in the five ranges, so that some race the partition
// commands of the test.
func startPartitionWriters(t testing.TB, dsn string, n int, next *int) (stop func() int64) {
	wdb := connect(t, dsn)
	ctx, cancel := context.WithCancel(context.Background())
	var count atomic.Int64
	done := make(chan error, 1)
	go func() {
		r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
		for ctx.Err() == nil {
			anywhere := r.IntN(5)*100000 + 1 + r.IntN(n)
			var sql string
			switch op := r.IntN(10); {
			case op < 3:
				sql = fmt.Sprintf(`UPDATE items SET v = v + 1 WHERE id = %d`, anywhere)
			case op < 4:
				sql = fmt.Sprintf(`DELETE FROM items WHERE id = %d`, anywhere)
			case op < 5:
				sql = fmt.Sprintf(`DELETE FROM items WHERE id = %d`, 1+r.IntN(*next))
			case op < 6:
				sql = fmt.Sprintf(`UPDATE items SET id = %d, pad = 'moved' WHERE id = %d`, *next, 1+r.IntN(*next))
				*next++
			default:
				sql = fmt.Sprintf(`INSERT INTO items VALUES (%d, 0, 'new')`, *next)
				*next++
			}
			if _, err := wdb.Exec(context.Background(), sql); err != nil {
				done <- fmt.Errorf("%s: %w", sql, err)
				return
			}
			count.Add(1)
			time.Sleep(2 * time.Millisecond) // pacing: a few hundred changes a second
		}
		done <- nil
	}()
	return func() int64 {
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return count.Load()
	}
}

// opCounts counts the events of evs by op, as "op×n" in op order.
func opCounts(evs []received) string {
	counts := map[string]int{}
	for _, e := range evs {
		counts[e.Op]++
	}
	var ops []string
	for op, n := range counts {
		ops = append(ops, fmt.Sprintf("%s×%d", op, n))
	}
	sort.Strings(ops)
	return strings.Join(ops, " ")
}

// TestPartitionsMirror: a copy of a partitioned table built from the
// stream by a consumer keeping the marker contract equals the table after
// each of: ATTACH of a partition holding rows (read events of its rows),
// DETACH of one (walcast is SIGKILLed once the watch has queued what
// heals it, and restarted), DROP of one, TRUNCATE of one, all while
// writers change rows of every partition, the ones the commands touch
// included. Without the partition watch the attached rows never reach the
// copy and the detached, dropped and truncated ones stay in it.
func TestPartitionsMirror(t *testing.T) {
	t.Parallel()
	n := 2000 * pgtest.Chaos(t, 1)
	dsn, db := newSource(t, partitionedItems(n)...)
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "parts", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL, Batch: 200})
	setSourceAttr(t, pipeline, `backfill_new_tables = true`)
	watch := "--slot-check-interval=200ms"
	proc := startCapturing(t, db, pipeline, watch)
	next := n + 1
	converge := func(step string, from int, started time.Time) int {
		t.Helper()
		var d []string
		waitFor(t, "the copy to equal the table after "+step, 2*time.Minute, func() bool {
			d = newResyncMirror([]string{"id"}, true).applyAll(t, rcv.events()).diff(t, db, "items")
			return len(d) == 0
		})
		evs := rcv.events()
		t.Logf("%s: converged in %s; events since the step: %s", step, time.Since(started).Round(10*time.Millisecond), opCounts(evs[from:]))
		return len(evs)
	}
	seen := converge("the first start's backfill", 0, time.Now())

	stop := startPartitionWriters(t, dsn, n, &next)
	began := time.Now()
	exec1(t, db, `ALTER TABLE items ATTACH PARTITION items_p4 FOR VALUES FROM (400000) TO (500000)`)
	writes := stop()
	seen = converge(fmt.Sprintf("ATTACH of a partition holding %d rows (%d writes)", n, writes), seen, began)

	stop = startPartitionWriters(t, dsn, n, &next)
	began = time.Now()
	exec1(t, db, `ALTER TABLE items DETACH PARTITION items_p1`)
	waitFor(t, "the watch to queue what heals the DETACH", time.Minute, func() bool {
		// The watch records the tree in the transaction that queues what
		// heals it.
		var recorded bool
		db.QueryRow(context.Background(), `SELECT NOT EXISTS (SELECT 1 FROM walcast.partitions WHERE pipeline = 'parts' AND partition = 'public.items_p1')`).Scan(&recorded)
		return recorded
	})
	proc.kill()
	proc = startWalcast(t, pipeline, watch)
	writes = stop()
	seen = converge(fmt.Sprintf("DETACH of a partition of %d rows, SIGKILL, restart (%d writes)", n, writes), seen, began)

	stop = startPartitionWriters(t, dsn, n, &next)
	began = time.Now()
	exec1(t, db, `DROP TABLE items_p2`)
	writes = stop()
	seen = converge(fmt.Sprintf("DROP of a partition of %d rows (%d writes)", n, writes), seen, began)

	stop = startPartitionWriters(t, dsn, n, &next)
	began = time.Now()
	exec1(t, db, `TRUNCATE items_p3`)
	writes = stop()
	converge(fmt.Sprintf("TRUNCATE of a partition of %d rows (%d writes)", n, writes), seen, began)
	proc.stop()
	sameContent(t, rcv.events())
	var left int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM items_p1`).Scan(&left); err != nil || left == 0 {
		t.Fatalf("the detached partition has %d rows (%v): the test proves nothing", left, err)
	}
}
