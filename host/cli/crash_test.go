package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/pgtest"
)

// TestCrashLoopLosesNothing kills walcast with SIGKILL three times while a
// 20,000+ change workload runs (both times WALCAST_CHAOS) and checks,
// against PostgreSQL's own
// test_decoding output, that every committed change arrived at least once,
// that redeliveries carry identical ids and bytes, and that each row's
// first deliveries arrived in commit order.
func TestCrashLoopLosesNothing(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	truthSlot(t, dsn, db, "truth_crash")
	rcv := newReceiver(t)
	// A receiver taking a few ms per request and two lanes spread the
	// delivery over a few seconds: the whole workload commits in well under
	// a second here. Each kill waits for a request the receiver holds.
	rcv.delay = 4 * time.Millisecond
	pipeline := writePipeline(t, "crash", dsn, []string{"public.items"},
		sinkSpec{ID: "hook", URL: rcv.URL, Batch: 50, Extra: "    max_in_flight = 2\n"})

	// The workload runs on its own connection while walcast is killed.
	wdb := connect(t, dsn)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 7))
	workDone := make(chan error, 1)
	proc := startCapturing(t, db, pipeline)
	go func() {
		_, err := workload(ctx, wdb, rand.New(rand.NewPCG(seed, 8)), pgtest.Chaos(t, 20000))
		workDone <- err
	}()
	kills, total, midStream := 0, 0, 0
	for kills < pgtest.Chaos(t, 3) {
		// Kill at a random point while walcast is delivering (the slot
		// holds far more than these few thousand events, so each kill
		// interrupts real work, often mid-transaction or between a
		// delivery and its checkpoint).
		target := rcv.count() + 1 + r.IntN(2500)
		// The receiver holds the request that reaches the target until
		// the kill: however slowly this loop runs on a loaded machine,
		// the kill lands with that batch in flight.
		held, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		rcv.setRespond(func(_ http.Header, _ []byte, evs []received) (int, http.Header) {
			if rcv.count()+len(evs) < target {
				return 0, nil
			}
			once.Do(func() { close(held) })
			<-release
			return http.StatusServiceUnavailable, nil // to a walcast that is gone
		})
		waitFor(t, "deliveries before kill", 60*time.Second, func() bool {
			select {
			case <-held:
				return true
			default:
			}
			// A fast run may deliver everything before the target: then
			// kill anyway (a restart with nothing left to replay).
			if total == 0 {
				select {
				case err := <-workDone:
					workDone <- err
					total = len(truth(t, db, "truth_crash", map[string]bool{"public.items": true}))
				default:
					return false
				}
			}
			return rcv.distinct() >= total
		})
		if r.IntN(2) == 0 {
			// Sometimes after a checkpoint write or two.
			time.Sleep(time.Duration(50+r.IntN(300)) * time.Millisecond)
		}
		proc.kill()
		close(release)
		rcv.setRespond(nil)
		kills++
		if done := workFinished(workDone, t, db); done < 0 || rcv.distinct() < done {
			midStream++
		}
		var cp string
		db.QueryRow(ctx, `SELECT coalesce(max(event_id), '-') FROM walcast.checkpoints`).Scan(&cp)
		t.Logf("kill %d: %d events received so far; checkpoint %s, slot at %X", kills, rcv.count(), cp, confirmedFlush(t, db, "walcast_crash"))
		proc = startWalcast(t, pipeline)
	}
	if err := <-workDone; err != nil {
		t.Fatal(err)
	}
	want := truth(t, db, "truth_crash", map[string]bool{"public.items": true})
	if len(want) < pgtest.Chaos(t, 20000) {
		t.Fatalf("workload committed only %d changes", len(want))
	}
	// A kill after everything arrived proves nothing: most must interrupt
	// real work.
	if midStream < 2 {
		t.Fatalf("only %d of %d kills landed while changes were still undelivered", midStream, kills)
	}
	waitFor(t, fmt.Sprintf("all %d changes to arrive", len(want)), 3*time.Minute, func() bool { return rcv.distinct() >= len(want) })
	proc.stop()
	got := rcv.events()
	dups := verify(t, want, got)
	t.Logf("%d committed changes, %d deliveries, %d duplicates after %d SIGKILLs (%d mid-stream)", len(want), len(got), dups, kills, midStream)
}

// workFinished returns how many changes the workload committed once it has
// finished, or -1 while it still runs.
func workFinished(workDone chan error, t *testing.T, db *pgx.Conn) int {
	select {
	case err := <-workDone:
		workDone <- err
		return len(truth(t, db, "truth_crash", map[string]bool{"public.items": true}))
	default:
		return -1
	}
}
