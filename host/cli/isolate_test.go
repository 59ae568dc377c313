package cli

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/delivery/isolate"
)

// TestSlowSinkDetachesCatchesUpAndRejoins runs a fast and a stalled
// webhook sink on one pipeline. The stalled one is detached onto a copy of
// the slot, so the fast one receives the whole workload while the stalled
// one receives nothing; walcast is SIGKILLed while the sink is detached and
// again while it catches up; the sink then catches up, rejoins, and its
// catch-up slot is dropped. Both receivers are checked against
// test_decoding: every committed change, row order of first deliveries.
// More changes after the rejoin reach both.
func TestSlowSinkDetachesCatchesUpAndRejoins(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	truthSlot(t, dsn, db, "truth_iso")
	fast, slow := newReceiver(t), newReceiver(t)
	slow.setMode(modeHang)
	pipeline := writePipeline(t, "iso", dsn, []string{"public.items"},
		sinkSpec{ID: "fast", URL: fast.URL, Batch: 200},
		sinkSpec{ID: "slow", URL: slow.URL, Batch: 100, Extra: "    max_in_flight = 2\n"})
	cuSlot := isolate.SlotName("walcast_iso", "slow")

	proc := startCapturing(t, db, pipeline)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	start := time.Now()
	if _, err := workload(ctx, db, rand.New(rand.NewPCG(seed, 12)), 20000); err != nil {
		t.Fatal(err)
	}
	tables := map[string]bool{"public.items": true}
	want := truth(t, db, "truth_iso", tables)
	waitFor(t, "the fast sink to receive every change while the slow one hangs", 2*time.Minute, func() bool {
		return fast.distinct() >= len(want)
	})
	t.Logf("fast sink: %d changes in %v with the slow sink stalled", len(want), time.Since(start).Round(time.Millisecond))
	proc.waitLog(t, "detaching it to catch up")
	if got := catchupSlots(t, db, "walcast_iso"); len(got) != 1 || got[0] != cuSlot {
		t.Fatalf("catch-up slots = %v, want [%s]", got, cuSlot)
	}
	// The pipeline's slot followed the fast sink: no transaction of the
	// workload is held by it any more.
	waitFor(t, "the pipeline's slot to move past the workload", time.Minute, func() bool {
		return confirmedFlush(t, db, "walcast_iso") >= lsnQuery(t, db, `SELECT pg_current_wal_lsn()`)-1<<20
	})

	// Killed while detached: the next start resumes catching up.
	proc.kill()
	proc = startWalcast(t, pipeline)
	proc.waitLog(t, "sink resumes catching up from its slot")

	// Let the slow sink go, slowly, and kill it again while it catches up.
	slow.setDelay(20 * time.Millisecond)
	slow.setMode(modeOK)
	waitFor(t, "the slow sink to start catching up", time.Minute, func() bool { return slow.distinct() > 2000 })
	proc.kill()
	t.Logf("killed while catching up: slow sink had %d of %d", slow.distinct(), len(want))
	// Slow enough that the handover takes a while: killed while rejoining.
	slow.setDelay(300 * time.Millisecond)
	proc = startWalcast(t, pipeline)
	proc.waitLog(t, "sink rejoining the live stream")
	proc.kill()
	inRejoin := !strings.Contains(proc.logText(), "sink rejoined the live stream")
	t.Logf("killed while rejoining: %v; slow sink had %d of %d", inRejoin, slow.distinct(), len(want))
	if inRejoin {
		// The mode is on record: walcast status shows it with no daemon.
		out, err := walcastCLI(t, "status", pipeline)
		if err != nil || !strings.Contains(out, "sink slow: rejoining on its own slot "+cuSlot) {
			t.Fatalf("walcast status after a kill while rejoining: %v\n%s", err, out)
		}
	}
	slow.setDelay(0)
	proc = startWalcast(t, pipeline)
	if inRejoin {
		proc.waitLog(t, "sink resumes catching up from its slot")
	}
	cuStart, cuFrom := time.Now(), slow.distinct()
	waitFor(t, "the slow sink to catch up", 3*time.Minute, func() bool { return slow.distinct() >= len(want) })
	t.Logf("catch-up: %d changes in %v", len(want)-cuFrom, time.Since(cuStart).Round(time.Millisecond))
	proc.waitLog(t, "sink rejoined the live stream")
	waitFor(t, "the catch-up slot to be dropped", time.Minute, func() bool { return len(catchupSlots(t, db, "walcast_iso")) == 0 })

	// Live again: new changes reach both.
	exec1(t, db, `UPDATE items SET v = v + 100 WHERE id IN (SELECT id FROM items ORDER BY id LIMIT 300)`)
	exec1(t, db, `INSERT INTO items SELECT g, 1, 'after' FROM generate_series(1000000, 1000199) g`)
	want = truth(t, db, "truth_iso", tables)
	waitFor(t, "both sinks to receive the changes made after the rejoin", time.Minute, func() bool {
		return fast.distinct() >= len(want) && slow.distinct() >= len(want)
	})
	proc.stop()
	dups := verify(t, want, slow.events())
	t.Logf("slow sink: %d changes, %d redelivered", len(want), dups)
	verify(t, want, fast.events())
	if o := slow.overlaps(); len(o) > 0 {
		t.Fatalf("rows in two requests at once at the slow sink: %v", o[:min(5, len(o))])
	}
	var rows int
	db.QueryRow(ctx, `SELECT count(*) FROM walcast.catchup_slots`).Scan(&rows)
	if rows != 0 {
		t.Fatalf("%d catch-up slot records left", rows)
	}
}

// TestTwoStalledSinksAndTeardown: two stalled sinks detach at once while a
// third keeps receiving; walcast status shows both catching up; a clean
// stop and restart resume both catch-up slots; released, both catch up
// with every change in row order and rejoin. A paused sink detaches,
// receives nothing while the others go on, and once resumed catches up
// and rejoins; paused again, its catch-up slot is dropped by walcast
// teardown.
func TestTwoStalledSinksAndTeardown(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	truthSlot(t, dsn, db, "truth_iso2")
	fast, s1, s2 := newReceiver(t), newReceiver(t), newReceiver(t)
	s1.setMode(modeHang)
	s2.setMode(modeFail)
	pipeline := writePipeline(t, "iso2", dsn, []string{"public.items"},
		sinkSpec{ID: "fast", URL: fast.URL, Batch: 200},
		sinkSpec{ID: "s1", URL: s1.URL, Batch: 50},
		sinkSpec{ID: "s2", URL: s2.URL, Batch: 50, Extra: "    detach_after = \"200ms\"\n    max_attempts = 1000\n"})
	proc := startWalcast(t, pipeline, "--metrics-listen", "127.0.0.1:0", "--warn-retained-wal-mb", "1", "--slot-check-interval", "200ms")
	base := metricsBase(t, proc)
	waitSlot(t, db, "walcast_iso2")
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	if _, err := workload(ctx, db, rand.New(rand.NewPCG(seed, 13)), 8000); err != nil {
		t.Fatal(err)
	}
	tables := map[string]bool{"public.items": true}
	want := truth(t, db, "truth_iso2", tables)
	waitFor(t, "the fast sink to receive every change", 2*time.Minute, func() bool { return fast.distinct() >= len(want) })
	waitFor(t, "two catch-up slots", time.Minute, func() bool { return len(catchupSlots(t, db, "walcast_iso2")) == 2 })
	// The WAL a detached sink needs is held by its catch-up slot, which
	// the slot watch warns about like the pipeline's own.
	waitFor(t, "a warning that a catch-up slot retains more WAL than 1 MiB", time.Minute, func() bool {
		for _, l := range strings.Split(proc.logText(), "\n") {
			if strings.Contains(l, "replication slot at risk") && strings.Contains(l, "slot="+isolate.SlotName("walcast_iso2", "s1")) {
				return true
			}
		}
		return false
	})
	out, err := walcastCLI(t, "status", pipeline)
	if err != nil {
		t.Fatalf("walcast status: %v\n%s", err, out)
	}
	for _, s := range []string{"sink s1: catching up on its own slot", "sink s2: catching up on its own slot"} {
		if !strings.Contains(out, s) {
			t.Fatalf("walcast status does not say %q:\n%s", s, out)
		}
	}
	// walcast status --json: every sink's mode; a detached one's catch-up
	// slot, the WAL it retains and how far it is behind the pipeline's
	// slot (which follows the fast sink past the workload).
	type sinkStatus struct {
		ID                      string `json:"id"`
		Mode                    string `json:"mode"`
		CatchupSlot             string `json:"catchup_slot"`
		CatchupRetainedWALBytes int64  `json:"catchup_retained_wal_bytes"`
		CatchupBehindBytes      int64  `json:"catchup_behind_bytes"`
		Backlog                 *struct {
			Events int64 `json:"events"`
			Bytes  int64 `json:"bytes"`
		} `json:"backlog"`
	}
	var lastStatus string
	defer func() {
		if t.Failed() {
			t.Logf("last walcast status --json:\n%s", lastStatus)
		}
	}()
	statusOf := func() map[string]sinkStatus {
		out, err := walcastCLI(t, "status", pipeline, "--json")
		lastStatus = out
		if err != nil {
			t.Fatalf("walcast status --json: %v\n%s", err, out)
		}
		var rep struct {
			Sinks []sinkStatus `json:"sinks"`
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("walcast status --json: %v\n%s", err, out)
		}
		m := map[string]sinkStatus{}
		for _, s := range rep.Sinks {
			m[s.ID] = s
		}
		return m
	}
	waitFor(t, "walcast status --json to show both catch-up slots behind the pipeline's, with their backlog", time.Minute, func() bool {
		st := statusOf()
		for _, id := range []string{"s1", "s2"} {
			s := st[id]
			if s.Mode != "catching_up" || s.CatchupSlot == "" || s.CatchupRetainedWALBytes <= 0 || s.CatchupBehindBytes <= 0 {
				return false
			}
			// Its lag in events and bytes: the catch-up stream's backlog,
			// as the leading daemon reports it.
			if s.Backlog == nil || s.Backlog.Events <= 0 || s.Backlog.Bytes <= 0 {
				return false
			}
		}
		return true
	})
	if f := statusOf()["fast"]; f.Mode != "live" || f.CatchupSlot != "" || f.CatchupBehindBytes != 0 {
		t.Fatalf("walcast status --json for the fast sink: %+v", f)
	}
	// The catch-up stream starts once the batches in flight at the
	// detachment have landed (the hanging receiver holds them up to the
	// plugin's timeout); its lag shows from then on.
	waitFor(t, "both sinks to be catching up in /metrics, with their lag", time.Minute, func() bool {
		mf := scrape(t, base)
		for _, sink := range []string{"s1", "s2"} {
			l := map[string]string{"pipeline": "iso2", "sink": sink, "type": "webhook", "mode": "catching_up"}
			if value(t, mf, "walcast_sink_mode", l) != 1 {
				return false
			}
			delete(l, "mode")
			if value(t, mf, "walcast_sink_catchup_behind_bytes", l) <= 0 || value(t, mf, "walcast_sink_backlog_events", l) <= 0 {
				return false
			}
		}
		return true
	})
	mf := scrape(t, base)
	for _, sink := range []string{"s1", "s2", "fast"} {
		l := map[string]string{"pipeline": "iso2", "sink": sink, "type": "webhook"}
		mode := "catching_up"
		if sink == "fast" {
			mode = "live"
		}
		l["mode"] = mode
		if v := value(t, mf, "walcast_sink_mode", l); v != 1 {
			t.Errorf("walcast_sink_mode%v = %v, want 1", l, v)
		}
		delete(l, "mode")
		if v := value(t, mf, "walcast_sink_catchup_slot_retained_wal_bytes", l); (v > 0) != (sink != "fast") {
			t.Errorf("walcast_sink_catchup_slot_retained_wal_bytes%v = %v", l, v)
		}
		// Lag in WAL bytes behind the pipeline's stream, and in events:
		// a detached sink's backlog is its catch-up stream's (read and
		// not delivered: the receivers hold it up).
		if v := value(t, mf, "walcast_sink_catchup_behind_bytes", l); (v > 0) != (sink != "fast") {
			t.Errorf("walcast_sink_catchup_behind_bytes%v = %v", l, v)
		}
		if v := value(t, mf, "walcast_sink_backlog_events", l); (v > 0) != (sink != "fast") {
			t.Errorf("walcast_sink_backlog_events%v = %v", l, v)
		}
		if v := value(t, mf, "walcast_sink_backlog_bytes", l); (v > 0) != (sink != "fast") {
			t.Errorf("walcast_sink_backlog_bytes%v = %v", l, v)
		}
	}

	proc.stop()
	proc = startWalcast(t, pipeline)
	waitFor(t, "both sinks to resume catching up", time.Minute, func() bool {
		return countLines(proc.logText(), "sink resumes catching up from its slot") == 2
	})
	s1.setMode(modeOK)
	s2.setMode(modeOK)
	waitFor(t, "both slow sinks to catch up", 3*time.Minute, func() bool {
		return s1.distinct() >= len(want) && s2.distinct() >= len(want)
	})
	waitFor(t, "both catch-up slots to be dropped", time.Minute, func() bool { return len(catchupSlots(t, db, "walcast_iso2")) == 0 })
	verify(t, want, s1.events())
	verify(t, want, s2.events())
	verify(t, want, fast.events())

	// A paused sink detaches at once; what is committed meanwhile reaches
	// the others, and the paused one after walcast resume, when it
	// catches up and rejoins.
	if out, err := walcastCLI(t, "pause", pipeline, "--sink", "s1"); err != nil {
		t.Fatalf("walcast pause: %v\n%s", err, out)
	}
	waitFor(t, "the paused sink to detach", time.Minute, func() bool { return len(catchupSlots(t, db, "walcast_iso2")) == 1 })
	exec1(t, db, `UPDATE items SET v = v + 1000 WHERE id IN (SELECT id FROM items ORDER BY id LIMIT 500)`)
	want = truth(t, db, "truth_iso2", tables)
	waitFor(t, "the other sinks to receive what was committed while s1 is paused", time.Minute, func() bool {
		return fast.distinct() >= len(want) && s2.distinct() >= len(want)
	})
	if got := s1.distinct(); got >= len(want) {
		t.Fatalf("the paused sink received %d of %d changes", got, len(want))
	}
	if out, err := walcastCLI(t, "resume", pipeline, "--sink", "s1"); err != nil {
		t.Fatalf("walcast resume: %v\n%s", err, out)
	}
	waitFor(t, "the resumed sink to catch up and rejoin", 2*time.Minute, func() bool {
		return s1.distinct() >= len(want) && len(catchupSlots(t, db, "walcast_iso2")) == 0
	})
	verify(t, want, s1.events())

	// Paused again, and torn down while detached.
	if out, err := walcastCLI(t, "pause", pipeline, "--sink", "s1"); err != nil {
		t.Fatalf("walcast pause: %v\n%s", err, out)
	}
	waitFor(t, "the paused sink to detach", time.Minute, func() bool { return len(catchupSlots(t, db, "walcast_iso2")) == 1 })
	proc.stop()
	if out, err := walcastCLI(t, "teardown", pipeline, "--yes"); err != nil {
		t.Fatalf("walcast teardown: %v\n%s", err, out)
	}
	if got := catchupSlots(t, db, "walcast_iso2"); len(got) != 0 {
		t.Fatalf("catch-up slots left after teardown: %v", got)
	}
}

// TestCatchupSlotDroppedByHand: a stalled sink is detached onto its
// catch-up slot and walcast stops; someone drops that slot. The changes
// the sink had not received are in no slot any more (the pipeline's slot
// followed the fast sink): walcast refuses to start until the gap is
// accepted, then the sink resumes from the pipeline's slot, missing
// exactly those changes, and receives everything after.
func TestCatchupSlotDroppedByHand(t *testing.T) {
	parallel(t)
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY)`)
	truthSlot(t, dsn, db, "truth_cudrop")
	fast, slow := newReceiver(t), newReceiver(t)
	slow.setMode(modeHang)
	pipeline := writePipeline(t, "cudrop", dsn, []string{"public.items"},
		sinkSpec{ID: "fast", URL: fast.URL}, sinkSpec{ID: "slow", URL: slow.URL})
	cuSlot := isolate.SlotName("walcast_cudrop", "slow")
	proc := startCapturing(t, db, pipeline)
	insertItems(t, db, 1, 3000)
	waitFor(t, "the fast sink to receive every insert", time.Minute, func() bool { return fast.distinct() >= 3000 })
	proc.waitLog(t, "detaching it to catch up")
	proc.kill()
	waitSlotReleased(t, db, cuSlot)
	exec1(t, db, `SELECT pg_drop_replication_slot($1)`, cuSlot)
	slow.setMode(modeOK)

	stdout, stderr, code := walcastTimed(t, time.Minute, nil, "run", pipeline, "--plugin-dir", binDir)
	out := stdout + stderr
	if code != 1 {
		t.Fatalf("walcast run with the catch-up slot dropped: exit %d (-1: still running after a minute), want 1; output:\n%s", code, out)
	}
	wantAll(t, out, "catch-up slot "+cuSlot+" of sink slow does not exist", "--accept-gap")
	status, _ := walcastOut(t, "status", pipeline)
	wantAll(t, status, "walcast run refuses to start (catch-up slot lost): catch-up slot "+cuSlot+" of sink slow does not exist")
	if n := slow.distinct(); n >= 3000 {
		t.Fatalf("the slow sink got %d rows although its changes are gone", n)
	}

	proc = startWalcast(t, pipeline, "--accept-gap")
	proc.waitLog(t, "the sink's catch-up slot was dropped")
	insertItems(t, db, 3001, 5)
	// The slow sink resumes from the pipeline's slot, which may lie well
	// before the gap: count the keys written after it, not its rows.
	waitFor(t, "both sinks to receive the inserts after the gap", time.Minute, func() bool {
		got := keysOf(slow.events(), func(r received) string { return r.Key })
		for _, k := range itemKeys(3001, 5) {
			if !got[k] {
				return false
			}
		}
		return fast.distinct() >= 3005
	})
	proc.stop()
	status, _ = walcastOut(t, "status", pipeline)
	wantAll(t, status, "(catch-up slot lost: slow): sink slow missed the changes after")
	if strings.Contains(status, "refuses to start") {
		t.Fatalf("walcast status still reports a refusal after the gap was accepted:\n%s", status)
	}
	want := truth(t, db, "truth_cudrop", map[string]bool{"public.items": true})
	verify(t, want, fast.events())
	for _, k := range itemKeys(3001, 5) {
		if !keysOf(slow.events(), func(r received) string { return r.Key })[k] {
			t.Fatalf("the slow sink lacks %s, committed after the gap was accepted", k)
		}
	}
}
