package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walcast/walcast/host/pgtest"
	"github.com/walcast/walcast/pluginkit"
)

// backfillWindow is the documented number of chunks the backfills of a
// pipeline may have written and not yet acknowledged.
const backfillWindow = 16

// chunkCounter counts, at a receiver, the backfill chunks of which at
// least one row arrived: every read event of a chunk carries the commit
// LSN of the chunk's transaction. A chunk the sink acknowledged had all of
// its rows arrive, so this is at least the number of chunks acknowledged.
type chunkCounter struct {
	mu     sync.Mutex
	chunks map[uint64]bool
	rows   map[pluginkit.EventID]bool
	last   pluginkit.EventID
}

func (c *chunkCounter) respond(_ http.Header, _ []byte, evs []received) (int, http.Header) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range evs {
		if e.Op != "read" {
			continue
		}
		c.chunks[e.ID.CommitLSN] = true
		c.rows[e.ID] = true
		if e.ID.Compare(c.last) > 0 {
			c.last = e.ID
		}
	}
	return 0, nil
}

func (c *chunkCounter) counts() (chunks, rows int, last pluginkit.EventID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.chunks), len(c.rows), c.last
}

func newChunkCounter(r *receiver) *chunkCounter {
	c := &chunkCounter{chunks: map[uint64]bool{}, rows: map[pluginkit.EventID]bool{}}
	r.setRespond(c.respond)
	return c
}

// TestBackfillWindowAcrossTablesKill backfills six tables requested at
// once to a sink limited to 2,000 events/s, and samples throughout how
// many chunks are written (walcast.backfills) against how many reached
// the receiver: the chunks written and not yet acknowledged, over the
// whole pipeline, must never exceed the window, also after walcast is
// SIGKILLed mid-backfill (WALCAST_CHAOS times, with as many times the
// rows) and started again. Every row arrives.
func TestBackfillWindowAcrossTablesKill(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	dsn, db := newSource(t)
	// More kills take more rows to land them in: each waits for the run
	// before it to write a chunk.
	kills := pgtest.Chaos(t, 1)
	const tables = 6
	rowsEach := 4000 * kills
	var names []string
	for i := 1; i <= tables; i++ {
		name := fmt.Sprintf("public.t%d", i)
		names = append(names, name)
		exec1(t, db, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, pad text NOT NULL)`, name))
		exec1(t, db, fmt.Sprintf(`INSERT INTO %s SELECT g, repeat('p', 40) FROM generate_series(1, %d) g`, name, rowsEach))
	}
	rcv := newReceiver(t)
	counter := newChunkCounter(rcv)
	const name = "bfwindow"
	pipeline := writePipeline(t, name, dsn, names,
		sinkSpec{ID: "hook", URL: rcv.URL, Batch: 100, Extra: "    rate_limit = 2000\n"})
	proc := startCapturing(t, db, pipeline)

	args := []string{"backfill", pipeline}
	for _, n := range names {
		args = append(args, "--table", n)
	}
	if out, errOut, code := walcastCmd(t, args...); code != 0 {
		t.Fatalf("walcast backfill exited %d:\n%s%s", code, out, errOut)
	}

	// written first, then what arrived: a chunk acknowledged when written
	// was read had arrived by the time the receiver is read.
	sdb := connect(t, dsn)
	type sample struct{ written, arrived int }
	sampleNow := func() (sample, bool) {
		var written, active int
		if err := sdb.QueryRow(ctx, `SELECT coalesce(sum(chunks_done), 0), count(*) FILTER (WHERE state IN ('queued', 'running'))
FROM walcast.backfills WHERE pipeline = $1`, name).Scan(&written, &active); err != nil {
			t.Fatal(err)
		}
		arrived, _, _ := counter.counts()
		return sample{written, arrived}, active > 0
	}
	worst, worstAfterKill, samples := 0, -1, 0
	killed, writtenAtKill := 0, 0
	deadline := time.Now().Add(time.Duration(5*kills) * time.Minute)
	for {
		s, active := sampleNow()
		samples++
		ahead := s.written - s.arrived
		worst = max(worst, ahead)
		if killed > 0 {
			worstAfterKill = max(worstAfterKill, ahead)
		}
		if ahead > backfillWindow {
			t.Fatalf("%d chunks written, of which at most %d reached the sink: %d written and not acknowledged, over the window of %d (kills so far: %d)",
				s.written, s.arrived, ahead, backfillWindow, killed)
		}
		// Kill while chunks wait for the window: those written before the
		// kill may not be acknowledged yet, and the next run must count them.
		// Each kill after the first waits for the run before it to write.
		if killed < kills && active && ahead >= backfillWindow/2 && s.written > writtenAtKill {
			proc.kill()
			killed++
			writtenAtKill = s.written
			t.Logf("kill %d: %d chunks written, %d reached the sink", killed, s.written, s.arrived)
			proc = startWalcast(t, pipeline)
		}
		_, rows, _ := counter.counts()
		if !active && rows >= tables*rowsEach {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d minutes: %d chunks written, %d and %d of %d rows arrived; backfills still active: %v", 5*kills, s.written, s.arrived, rows, tables*rowsEach, active)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if killed < kills {
		t.Fatalf("the backfills ended before kill %d could land while chunks waited for the window", killed+1)
	}
	proc.stop()
	s, _ := sampleNow()
	t.Logf("%d samples: at most %d chunks written and not acknowledged (window %d; %d after the kills); %d chunks, %d rows, %d kills",
		samples, worst, backfillWindow, worstAfterKill, s.written, tables*rowsEach, killed)
}

// TestBackfillWaitAcknowledged: walcast backfill --wait must return only
// once the sink acknowledged the rows, not once they are written. The
// receiver holds every request until the backfill is written; --wait must
// still be waiting then (and say for what), and when it returns every row
// has arrived and the sink's checkpoint covers the last one.
func TestBackfillWaitAcknowledged(t *testing.T) {
	ctx := context.Background()
	dsn, db := newSource(t)
	const rows = 3000
	exec1(t, db, `CREATE TABLE items (id int PRIMARY KEY, pad text NOT NULL)`)
	exec1(t, db, fmt.Sprintf(`INSERT INTO items SELECT g, repeat('p', 40) FROM generate_series(1, %d) g`, rows))
	rcv := newReceiver(t)
	counter := newChunkCounter(rcv)
	const name = "bfwait"
	pipeline := writePipeline(t, name, dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL, Batch: 100})
	proc := startCapturing(t, db, pipeline)

	if _, errOut, code := walcastCmd(t, "backfill", pipeline, "--table", "public.items", "--wait", "--until", "soon"); code != 2 || !strings.Contains(errOut, "want acknowledged or written") {
		t.Fatalf("--until soon: exit %d, %q; want 2 and the accepted values", code, errOut)
	}

	rcv.setMode(modeHang)
	var out syncBuffer
	cmd := walcastCommand("backfill", pipeline, "--table", "public.items", "--wait")
	cmd.Stdout, cmd.Stderr = &out, &out
	backfill := startLogged(t, cmd, "walcast backfill")
	var id int64
	waitFor(t, "the backfill to be queued", time.Minute, func() bool {
		_, err := fmt.Sscanf(out.String(), "backfill %d ", &id)
		return err == nil
	})
	waitFor(t, "the backfill to be written", 2*time.Minute, func() bool { s, _, _ := backfillState(t, db, id); return s == "done" })
	// Written, not acknowledged: the receiver holds every request.
	waitDeadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(out.String(), "to acknowledge every row") {
		select {
		case <-backfill.exited:
			_, got, _ := counter.counts()
			t.Fatalf("walcast backfill --wait returned (%v) once the rows were written, with %d of %d rows at the sink:\n%s", backfill.err, got, rows, out.String())
		case <-time.After(25 * time.Millisecond):
		}
		if time.Now().After(waitDeadline) {
			t.Fatalf("walcast backfill --wait neither returned nor said it waits for the sink:\n%s", out.String())
		}
	}
	rcv.setMode(modeOK)
	select {
	case <-backfill.exited:
		if err := backfill.err; err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				t.Fatalf("walcast backfill --wait exited %d:\n%s", ee.ExitCode(), out.String())
			}
			t.Fatal(err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("walcast backfill --wait did not return within 3 minutes of the sink taking rows:\n%s", out.String())
	}
	_, got, last := counter.counts()
	if got != rows {
		t.Fatalf("walcast backfill --wait returned with %d of %d rows at the sink:\n%s", got, rows, out.String())
	}
	var lsn string
	var idx int64
	if err := db.QueryRow(ctx, `SELECT commit_lsn::text, idx FROM walcast.checkpoints WHERE pipeline = $1 AND sink = 'hook'`, name).Scan(&lsn, &idx); err != nil {
		t.Fatal(err)
	}
	commit, _ := pluginkit.ParseLSN(lsn)
	if mark := (pluginkit.EventID{CommitLSN: commit, Index: uint64(idx)}); mark.Compare(last) < 0 {
		t.Fatalf("walcast backfill --wait returned with the sink's checkpoint at %s, before the last read event %s", mark, last)
	}
	if !strings.Contains(out.String(), "sink hook acknowledged every row") {
		t.Fatalf("walcast backfill --wait does not say what it waited for:\n%s", out.String())
	}
	proc.stop()
	t.Logf("--wait returned with all %d rows at the sink, checkpoint at or past %s:\n%s", rows, last, out.String())
}
