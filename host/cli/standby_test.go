package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestStandbyTakesOver runs two walcast processes of one pipeline: one
// streams, the other stands by quietly; when the leader is SIGKILLed the
// standby streams, and every committed change arrives (checked against
// test_decoding); a graceful stop hands over too. The takeover times are
// logged (docs/operations.md quotes them), not asserted.
func TestStandbyTakesOver(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	truthSlot(t, dsn, db, "truth_standby")
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "standby", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL, Batch: 20})

	first, second := leaderAndStandby(t, pipeline)
	exec1(t, db, `INSERT INTO items SELECT g, 0, 'a' FROM generate_series(1, 100) g`)
	waitFor(t, "the leader to deliver", time.Minute, func() bool { return rcv.distinct() >= 100 })
	// Standing by is quiet: one line, not a warning a second.
	time.Sleep(3 * time.Second)
	if n := strings.Count(second.logText(), "standing by"); n != 1 {
		t.Errorf("the standby logged %d standing-by lines, want 1:\n%s", n, second.logText())
	}
	if strings.Contains(second.logText(), "streaming from slot") {
		t.Fatal("two walcast processes stream the same pipeline")
	}
	if out, _, code := walcastCmd(t, "status", pipeline); code != 0 || !strings.Contains(out, "leader: walcast ") {
		t.Errorf("walcast status does not name the leader (exit %d):\n%s", code, out)
	}
	var report struct {
		Leader *struct {
			Name string `json:"name"`
		} `json:"leader"`
		Slot  struct{ State string }                   `json:"slot"`
		Sinks []struct{ ID, State, Checkpoint string } `json:"sinks"`
	}
	out, _, code := walcastCmd(t, "status", pipeline, "--json")
	if err := json.Unmarshal([]byte(out), &report); err != nil || code != 0 {
		t.Fatalf("walcast status --json (exit %d): %v\n%s", code, err, out)
	}
	if report.Leader == nil || !strings.HasPrefix(report.Leader.Name, "walcast ") || report.Slot.State != "active" ||
		len(report.Sinks) != 1 || report.Sinks[0].State != "running" || report.Sinks[0].Checkpoint == "" {
		t.Errorf("walcast status --json with a leader:\n%s", out)
	}

	// The leader dies without a word; changes keep being committed.
	first.kill()
	killed := time.Now()
	exec1(t, db, `INSERT INTO items SELECT g, 1, 'b' FROM generate_series(101, 200) g`)
	second.waitLog(t, "streaming from slot")
	t.Logf("takeover after SIGKILL: %s", time.Since(killed).Round(time.Millisecond))
	waitFor(t, "the new leader to deliver", time.Minute, func() bool { return rcv.distinct() >= 200 })

	// A graceful stop hands over at once to a third process.
	third := startWalcast(t, pipeline)
	third.waitLog(t, "standing by")
	stopped := time.Now()
	second.stop()
	third.waitLog(t, "streaming from slot")
	t.Logf("takeover after SIGTERM: %s", time.Since(stopped).Round(time.Millisecond))
	exec1(t, db, `UPDATE items SET v = 2 WHERE id <= 50`)
	want := truth(t, db, "truth_standby", map[string]bool{"public.items": true})
	waitFor(t, fmt.Sprintf("all %d changes", len(want)), time.Minute, func() bool { return rcv.distinct() >= len(want) })

	// Fencing: a leader whose lock session is cut (a network partition, an
	// administrator, PostgreSQL restarting) stops delivering at once and
	// stands by again; alone, it leads again and goes on.
	exec1(t, db, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'walcast %'`)
	third.waitLog(t, "leadership lost")
	waitFor(t, "the process to lead again", time.Minute, func() bool {
		return strings.Count(third.logText(), "streaming from slot") >= 2
	})
	exec1(t, db, `UPDATE items SET v = 3 WHERE id > 150`)
	want = truth(t, db, "truth_standby", map[string]bool{"public.items": true})
	waitFor(t, fmt.Sprintf("all %d changes after leading again", len(want)), time.Minute, func() bool { return rcv.distinct() >= len(want) })
	third.stop()
	verify(t, want, rcv.events())
	// With no walcast run, status says so instead of "running".
	if out, _, _ := walcastCmd(t, "status", pipeline); !strings.Contains(out, "leader: none") || !strings.Contains(out, "idle (no walcast run)") || strings.Contains(out, " running ") {
		t.Errorf("walcast status with nothing running:\n%s", out)
	}
}
