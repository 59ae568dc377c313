package cli

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMaxPipelinesCapsEachInstance runs two instances with the same four
// pipelines and --max-pipelines 1: each leads exactly one, the two others
// wait unled (both instances stand by for them) and stay so, and
// `walcast status`, /healthz and walcast_leader say so. A third instance
// allowed two leads those two; then every pipeline delivers.
func TestMaxPipelinesCapsEachInstance(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	rcvs := []*receiver{newReceiver(t), newReceiver(t), newReceiver(t), newReceiver(t)}
	dir, files := pipelineDir(t, dsn, "capped", rcvs)
	names := make([]string, len(files))
	for i := range files {
		names[i] = fmt.Sprintf("capped%d", i)
	}
	procs := []*walcastProc{
		startWalcast(t, dir, "--max-pipelines", "1", "--metrics-listen", "127.0.0.1:0"),
		startWalcast(t, dir, "--max-pipelines", "1", "--metrics-listen", "127.0.0.1:0"),
	}
	bases := []string{metricsBase(t, procs[0]), metricsBase(t, procs[1])}
	// leaders maps each led pipeline to its leader.
	leaders := func() map[string]string {
		out, err := leadersOf(db, names)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	oneEach := func() bool {
		per := map[string]int{}
		for _, h := range leaders() {
			per[h]++
		}
		return len(per) == 2 && per[holderName(procs[0])] == 1 && per[holderName(procs[1])] == 1
	}
	waitFor(t, "each instance to lead one pipeline", time.Minute, oneEach)
	// The two others stay unled: a pipeline unled for three polls is taken
	// even over the fair share, never over the cap. Six polls.
	time.Sleep(12 * time.Second)
	led := leaders()
	if !oneEach() || len(led) != 2 {
		t.Fatalf("with --max-pipelines 1 on two instances, the leaders are %v; want one pipeline each, two unled", led)
	}

	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".hcl")
		out, _, code := walcastCmd(t, "status", f)
		if code != 0 {
			t.Fatalf("walcast status %s: exit %d\n%s", name, code, out)
		}
		if h, ok := led[name]; ok {
			if !strings.Contains(out, "leader: "+h+" ") || countLines(out, "standby: walcast ") != 1 {
				t.Errorf("walcast status of %s (led by %s) should name its leader and one standby:\n%s", name, h, out)
			}
		} else if !strings.Contains(out, "leader: none") || countLines(out, "standby: walcast ") != 2 {
			t.Errorf("walcast status of the unled %s should say it has no leader and two standbys:\n%s", name, out)
		}
	}
	for i, base := range bases {
		code, body := healthz(t, base)
		if code != http.StatusOK || countLines(body, ": leader, streaming") != 1 || countLines(body, ": standby") != 3 {
			t.Errorf("/healthz of instance %d: %d\n%s\nwant 200, one pipeline leading and three standing by", i, code, body)
		}
		mf := scrape(t, base)
		sum := 0.0
		for _, n := range names {
			sum += value(t, mf, "walcast_leader", map[string]string{"pipeline": n})
		}
		if sum != 1 {
			t.Errorf("instance %d: walcast_leader sums to %v over the pipelines, want 1", i, sum)
		}
	}
	for n := range led {
		waitSlot(t, db, "walcast_"+n)
	}
	exec1(t, db, `INSERT INTO items SELECT g, 0 FROM generate_series(1, 10) g`)
	for i, r := range rcvs {
		if _, ok := led[names[i]]; ok {
			waitFor(t, names[i]+" to deliver", time.Minute, func() bool { return r.distinct() >= 10 })
		}
	}

	// A third instance allowed two takes both unled pipelines.
	third := startWalcast(t, dir, "--max-pipelines", "2")
	waitFor(t, "every pipeline led, 1/1/2", time.Minute, func() bool {
		per := map[string]int{}
		for _, h := range leaders() {
			per[h]++
		}
		return per[holderName(procs[0])] == 1 && per[holderName(procs[1])] == 1 && per[holderName(third)] == 2
	})
	for _, n := range names {
		waitSlot(t, db, "walcast_"+n)
	}
	exec1(t, db, `INSERT INTO items SELECT g, 0 FROM generate_series(11, 20) g`)
	for i, r := range rcvs {
		want := 20
		if _, ok := led[names[i]]; !ok {
			want = 10 // its slot was created after the first rows
		}
		waitFor(t, fmt.Sprintf("%s to deliver %d rows", names[i], want), time.Minute, func() bool { return r.distinct() >= want })
	}
	for _, p := range append(procs, third) {
		p.stop()
	}
}

// TestFailedPipelineStopsAlone runs three pipelines in one walcast; one
// fails for good while it streams (its publication is dropped): that
// pipeline stops with its explicit error, the process and the two others
// go on delivering, and /healthz (503, naming it) and
// walcast_pipeline_failed show it.
func TestFailedPipelineStopsAlone(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	rcvs := []*receiver{newReceiver(t), newReceiver(t), newReceiver(t)}
	dir, _ := pipelineDir(t, dsn, "alone", rcvs)
	proc := startWalcast(t, dir, "--metrics-listen", "127.0.0.1:0")
	base := metricsBase(t, proc)
	for i := range rcvs {
		waitSlot(t, db, fmt.Sprintf("walcast_alone%d", i))
	}
	exec1(t, db, `INSERT INTO items SELECT g, 0 FROM generate_series(1, 10) g`)
	for i, r := range rcvs {
		waitFor(t, fmt.Sprintf("alone%d to deliver", i), time.Minute, func() bool { return r.distinct() >= 10 })
	}
	if code, body := healthz(t, base); code != http.StatusOK || countLines(body, ": leader, streaming") != 3 {
		t.Fatalf("/healthz before the failure: %d\n%s", code, body)
	}

	exec1(t, db, `DROP PUBLICATION walcast_alone1`)
	exec1(t, db, `INSERT INTO items SELECT g, 0 FROM generate_series(11, 20) g`)
	proc.waitLog(t, "pipeline stopped for good")
	wantAll(t, proc.logText(), "publication walcast_alone1 was dropped while walcast ran", "the other pipelines go on")
	failed := func(n string) float64 {
		return value(t, scrape(t, base), "walcast_pipeline_failed", map[string]string{"pipeline": n})
	}
	if failed("alone1") != 1 || failed("alone0") != 0 || failed("alone2") != 0 {
		t.Errorf("walcast_pipeline_failed: alone0 %v, alone1 %v, alone2 %v; want 0, 1, 0", failed("alone0"), failed("alone1"), failed("alone2"))
	}
	code, body := healthz(t, base)
	t.Logf("/healthz after the failure: %d\n%s", code, body)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "alone1: failed: ") || !strings.Contains(body, "was dropped while walcast ran") ||
		!strings.Contains(body, "alone0: leader, streaming") || !strings.Contains(body, "alone2: leader, streaming") {
		t.Errorf("/healthz after alone1 failed: %d\n%s", code, body)
	}

	// The others go on: the rows committed around the failure and after.
	exec1(t, db, `INSERT INTO items SELECT g, 0 FROM generate_series(21, 30) g`)
	for _, i := range []int{0, 2} {
		waitFor(t, fmt.Sprintf("alone%d to deliver after alone1 failed", i), time.Minute, func() bool { return rcvs[i].distinct() >= 30 })
	}
	select {
	case <-proc.exited:
		t.Fatalf("walcast exited (%v) while two pipelines could go on", proc.err)
	default:
	}
	if n := rcvs[1].distinct(); n > 20 {
		t.Errorf("the failed pipeline delivered %d rows, want none after it stopped", n)
	}
	// Stopped, the process reports the failure: exit 1 naming the pipeline.
	proc.cmd.Process.Signal(os.Interrupt)
	select {
	case <-proc.exited:
		if proc.err == nil {
			t.Error("walcast exited 0 with a pipeline that failed")
		}
	case <-time.After(time.Minute):
		t.Fatal("walcast did not exit within a minute of SIGINT")
	}
	if !strings.Contains(proc.logText(), "pipeline alone1: ") {
		t.Errorf("the exit error does not name the failed pipeline:\n%s", tail(proc.logText(), 5))
	}
}
