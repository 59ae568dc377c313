package cli

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// vmHWM is a process's peak resident memory as /proc reports it.
func vmHWM(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			return strings.TrimSpace(strings.TrimPrefix(l, "VmHWM:"))
		}
	}
	return "?"
}

// TestIsolationFigures measures, for the report, how long a fast webhook
// sink takes to drain 100,000 changes alone, next to a stalled sink and
// next to one taking 2 s per request, then how fast the stalled one
// catches up, and walcast's peak memory. Run with WALCAST_FIGURES=1.
func TestIsolationFigures(t *testing.T) {
	if os.Getenv("WALCAST_FIGURES") == "" {
		t.Skip("set WALCAST_FIGURES=1 to measure")
	}
	const n = 100000
	for _, c := range []struct {
		name  string
		slow  receiverMode
		delay time.Duration
		alone bool
	}{{"alone", modeOK, 0, true}, {"next to a stalled sink", modeHang, 0, false}, {"next to a 2s-per-request sink", modeOK, 2 * time.Second, false}} {
		dsn := cluster.Database(t)
		db := connect(t, dsn)
		exec1(t, db, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
		fast, slow := newReceiver(t), newReceiver(t)
		slow.setMode(c.slow)
		slow.delay = c.delay
		name := "fig" + strconv.Itoa(int(time.Now().UnixNano()%1e6))
		sinks := []sinkSpec{{ID: "fast", URL: fast.URL, Batch: 500}}
		if !c.alone {
			sinks = append(sinks, sinkSpec{ID: "slow", URL: slow.URL, Batch: 500, Config: "    url = \"" + slow.URL + "\"\n    timeout = \"30s\"\n"})
		}
		pipeline := writePipeline(t, name, dsn, []string{"public.items"}, sinks...)
		proc := startWalcast(t, pipeline)
		waitSlot(t, db, "walcast_"+name)
		for i := 0; i < 10; i++ {
			exec1(t, db, `INSERT INTO items SELECT g, 0, repeat('x', 50) FROM generate_series($1::int, $2::int) g`, i*n/10+1, (i+1)*n/10)
		}
		start := time.Now()
		waitFor(t, "fast sink", 5*time.Minute, func() bool { return fast.distinct() >= n })
		took := time.Since(start)
		t.Logf("%s: fast sink drained %d changes %v after the last commit (%.0f changes/s); walcast peak RSS %s",
			c.name, n, took.Round(time.Millisecond), n/took.Seconds(), vmHWM(proc.cmd.Process.Pid))
		if c.slow == modeHang {
			slow.setMode(modeOK)
			from, at := slow.distinct(), time.Now()
			waitFor(t, "slow sink to catch up", 5*time.Minute, func() bool { return slow.distinct() >= n })
			cu := time.Since(at)
			proc.waitLog(t, "sink rejoined the live stream")
			t.Logf("catch-up: %d changes in %v (%.0f changes/s); walcast peak RSS %s", n-from, cu.Round(time.Millisecond),
				float64(n-from)/cu.Seconds(), vmHWM(proc.cmd.Process.Pid))
		}
		proc.kill()
	}
}
