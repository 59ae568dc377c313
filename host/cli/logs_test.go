package cli

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunLogSaysEachThingOnce runs a short pipeline the way an operator
// sees it: a webhook that takes the events, one that fails until it parks
// them, a stdout sink, one plugin crash, then SIGTERM; and a run whose
// sink config is rejected. In the log, every line has each key once, a
// normal start and stop says nothing of plugin processes exiting (that
// is go-plugin's bookkeeping), the crash is one line saying how the
// process ended, no error text repeats the sink id the line already
// carries, and the startup error is printed once.
func TestRunLogSaysEachThingOnce(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	good := newReceiver(t)
	bad := newReceiver(t)
	bad.setMode(modeFail)
	p := startWalcast(t, writePipeline(t, "logs", dsn, []string{"public.items"},
		sinkSpec{ID: "good", URL: good.URL},
		sinkSpec{ID: "bad", URL: bad.URL, Extra: "    max_attempts = 2\n"},
		sinkSpec{ID: "out", SinkType: "stdout", Config: " "},
	))
	p.waitLog(t, "streaming from slot")
	exec1(t, db, `INSERT INTO items VALUES (1, 0)`)
	waitFor(t, "the first event delivered", time.Minute, func() bool { return good.count() == 1 })
	p.waitLog(t, "event parked after failed attempts")
	start := p.logText()
	if n := countLines(start, "plugin process exited"); n != 0 {
		t.Errorf("a normal start logs %d \"plugin process exited\" lines, want none", n)
	}

	// Crash the good sink's plugin; the next event restarts it.
	var crashed int
	for _, pid := range childPIDs(p.cmd.Process.Pid) {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); strings.HasSuffix(exe, "walcast-sink-webhook") {
			crashed = pid
			break
		}
	}
	if crashed == 0 {
		t.Fatal("no webhook plugin process found")
	}
	// Which webhook plugin it is does not matter: both restart.
	syscall.Kill(crashed, syscall.SIGKILL)
	exec1(t, db, `INSERT INTO items VALUES (2, 0)`)
	waitFor(t, "the second event delivered", time.Minute, func() bool { return good.count() == 2 })
	p.waitLog(t, "sink plugin process died")
	p.stop()
	log := p.logText()

	checkLogLines(t, log)
	if n := countLines(log, "plugin process exited"); n != 0 {
		t.Errorf("%d \"plugin process exited\" lines at info or above, want none", n)
	}
	var killed []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "signal: killed") {
			killed = append(killed, l)
		}
	}
	if len(killed) != 1 || !strings.Contains(killed[0], `msg="sink plugin process died"`) || !strings.Contains(killed[0], `exit="signal: killed"`) {
		t.Errorf("the crash appears on %d lines, want one \"sink plugin process died\" saying how it ended:\n%s", len(killed), strings.Join(killed, "\n"))
	}

	// A sink whose config the plugin rejects stops the start: one error.
	out := runOnce(t, writePipeline(t, "logs_badcfg", dsn, []string{"public.items"},
		sinkSpec{ID: "badcfg", Config: "    url = \"ftp://example.com\"\n"},
	))
	checkLogLines(t, out)
	if n := countLines(out, "scheme must be http or https"); n != 1 {
		t.Errorf("the config error appears on %d lines, want 1:\n%s", n, out)
	}
	if n := countLines(out, "plugin process exited"); n != 0 {
		t.Errorf("a failed start logs %d \"plugin process exited\" lines, want none:\n%s", n, out)
	}
}

// checkLogLines requires every slog text line in log to name each key
// once, and no err value to begin with the sink id the line carries.
func checkLogLines(t *testing.T, log string) {
	t.Helper()
	for _, line := range strings.Split(log, "\n") {
		if !strings.HasPrefix(line, "time=") {
			continue // events on stdout, plain error output
		}
		kv, err := parseLogfmt(line)
		if err != nil {
			t.Errorf("cannot parse log line %q: %v", line, err)
			continue
		}
		seen := map[string]bool{}
		for _, f := range kv {
			if seen[f[0]] {
				t.Errorf("key %s twice in one line: %s", f[0], line)
			}
			seen[f[0]] = true
		}
		for _, f := range kv {
			if f[0] != "sink" {
				continue
			}
			for _, g := range kv {
				if (g[0] == "err" || g[0] == "error") && strings.HasPrefix(g[1], "sink "+f[1]+":") {
					t.Errorf("the error repeats the line's sink id: %s", line)
				}
			}
		}
	}
}

// parseLogfmt splits a slog text line into its keys and values, in order.
func parseLogfmt(line string) ([][2]string, error) {
	var out [][2]string
	for i := 0; i < len(line); {
		if line[i] == ' ' {
			i++
			continue
		}
		eq := strings.IndexByte(line[i:], '=')
		if eq <= 0 {
			return nil, fmt.Errorf("no key at %d", i)
		}
		key := line[i : i+eq]
		i += eq + 1
		var val string
		if i < len(line) && line[i] == '"' {
			j := i + 1
			var b strings.Builder
			for ; j < len(line) && line[j] != '"'; j++ {
				if line[j] == '\\' && j+1 < len(line) {
					j++
				}
				b.WriteByte(line[j])
			}
			if j >= len(line) {
				return nil, fmt.Errorf("unterminated value of %s", key)
			}
			val, i = b.String(), j+1
		} else {
			j := strings.IndexByte(line[i:], ' ')
			if j < 0 {
				j = len(line) - i
			}
			val, i = line[i:i+j], i+j
		}
		out = append(out, [2]string{key, val})
	}
	return out, nil
}
