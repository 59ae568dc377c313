package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/delivery/isolate"
	"github.com/walcast/walcast/host/pgtest"
)

// A replication connection that goes silent (a NAT or firewall drops the
// flow, the server vanishes without a reset) must be ended and reconnected
// within the receive timeout, while the pipeline's other connections,
// through the same proxy, stay healthy: nothing committed is lost, and the
// log, /healthz, walcast status and a metric say what happened.

// silentLine is the warning walcast logs when it ends a silent stream.
const silentLine = "replication stream silent for the receive timeout"

var silentFor = regexp.MustCompile(`silent_for=([0-9.]+m?s)`)

// silences returns how long each stream walcast ended had been silent.
func silences(t *testing.T, log string) []time.Duration {
	t.Helper()
	var out []time.Duration
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, silentLine) {
			continue
		}
		m := silentFor.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("no silent_for in %q", l)
		}
		d, err := time.ParseDuration(m[1])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

// steadyWriter inserts one row per transaction into items every few
// milliseconds on a direct connection until stopped; written is how many
// it committed.
type steadyWriter struct {
	written atomic.Int64
	stop    chan struct{}
	done    chan error
}

func startWriter(t *testing.T, dsn string) *steadyWriter {
	t.Helper()
	db := connect(t, dsn)
	w := &steadyWriter{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		for id := 1; ; id++ {
			select {
			case <-w.stop:
				w.done <- nil
				return
			case <-time.After(10 * time.Millisecond):
			}
			if _, err := db.Exec(context.Background(), `INSERT INTO items VALUES ($1, 0)`, id); err != nil {
				w.done <- err
				return
			}
			w.written.Add(1)
		}
	}()
	t.Cleanup(func() {
		select {
		case <-w.stop:
		default:
			close(w.stop)
			<-w.done
		}
	})
	return w
}

func (w *steadyWriter) finish(t *testing.T) {
	t.Helper()
	close(w.stop)
	if err := <-w.done; err != nil {
		t.Fatalf("writer: %v", err)
	}
}

// watchHealth polls /healthz until stop is closed and returns the first
// 503 body that names a silent stream ("" when none was seen).
func watchHealth(base string, stop <-chan struct{}) <-chan string {
	out := make(chan string, 1)
	go func() {
		seen := ""
		for {
			select {
			case <-stop:
				out <- seen
				return
			case <-time.After(50 * time.Millisecond):
			}
			resp, err := http.Get(base + "/healthz")
			if err != nil {
				continue
			}
			var b strings.Builder
			buf := make([]byte, 4096)
			n, _ := resp.Body.Read(buf)
			b.Write(buf[:n])
			resp.Body.Close()
			if seen == "" && resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(b.String(), "replication stream silent for") {
				seen = b.String()
			}
		}
	}()
	return out
}

// waitArrived waits up to two minutes for got() to reach want, and says
// how far it got if it does not.
func waitArrived(t *testing.T, what string, got func() int64, want int64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for got() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s only %d arrived within 2m", what, got())
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// TestProxySilentReplicationStream silences walcast's replication
// connection (only that one: the control pool and the leadership lock go
// through the same proxy and keep working) under a steady write load,
// several times. Each time the stream must be ended once it has been
// silent for the receive timeout (by default twice wal_sender_timeout,
// here 2 s for walcast's sessions), reconnected, and everything committed,
// before and during the silence, delivered: checked against
// test_decoding. The warning, /healthz (503 while silent, then the count),
// walcast_stream_receive_timeouts_total and walcast status show it.
func TestProxySilentReplicationStream(t *testing.T) {
	direct, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	truthSlot(t, direct, db, "truth_silent")
	proxy := cluster.Proxy(t)
	dsn := pgtest.WithOptions(t, proxy.DSN(direct), "-c wal_sender_timeout=2s")
	const timeout = 4 * time.Second
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "silent", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL, Batch: 50})
	proc := startWalcast(t, pipeline, "--metrics-listen", "127.0.0.1:0")
	base := metricsBase(t, proc)
	proc.waitLog(t, "streaming from slot")
	if !strings.Contains(proc.logText(), "receive_timeout="+timeout.String()) {
		t.Fatalf("the stream's receive timeout is not twice wal_sender_timeout (2s):\n%s", proc.logText())
	}
	w := startWriter(t, direct)

	rounds := pgtest.Chaos(t, 2)
	seen503 := ""
	// Replication connections before the first silence: the stream's, and
	// whatever the start used to check the role.
	opened := 0
	for round := 1; round <= rounds; round++ {
		before := w.written.Load() + 20
		waitFor(t, "the stream to deliver before the silence", 2*time.Minute, func() bool {
			return w.written.Load() >= before && int64(rcv.distinct()) >= before
		})
		if round == 1 {
			opened = proxy.Replication()
		}
		stopHealth := make(chan struct{})
		health := watchHealth(base, stopHealth)
		if n := proxy.SilenceReplication(); n != 1 {
			t.Fatalf("round %d: silenced %d replication connections, want 1", round, n)
		}
		silenced := time.Now()
		// Rows committed while the connection is silent.
		during := w.written.Load() + 100
		waitFor(t, "rows committed during the silence", time.Minute, func() bool { return w.written.Load() >= during })
		waitArrived(t, fmt.Sprintf("round %d: of the %d changes committed so far, the last %d while the replication connection was silent,", round, during, during-before),
			func() int64 { return int64(rcv.distinct()) }, during)
		took := time.Since(silenced)
		close(stopHealth)
		if body := <-health; body != "" && seen503 == "" {
			seen503 = body
		}
		cuts := silences(t, proc.logText())
		if len(cuts) != round {
			t.Fatalf("round %d: walcast logged %d silent streams, want %d:\n%s", round, len(cuts), round, proc.logText())
		}
		if got := cuts[round-1]; got < timeout || got > timeout+5*time.Second {
			t.Errorf("round %d: the stream was ended after %s of silence, want within [%s, %s]", round, got, timeout, timeout+5*time.Second)
		}
		if got := proxy.Replication() - opened; got != round {
			t.Errorf("round %d: %d replication connections through the proxy since the first silence, want %d (one reconnect per silence)", round, got, round)
		}
		t.Logf("round %d: silenced; ended after %s of silence; everything delivered %s after the silence began", round, cuts[round-1], took.Round(time.Millisecond))
	}
	if seen503 == "" {
		t.Error("/healthz never said 503 \"replication stream silent\" while a stream was silent")
	} else {
		t.Logf("/healthz while silent: %q", seen503)
	}
	want := fmt.Sprintf("%d silent stream", rounds)
	waitFor(t, "/healthz to count the silent streams", time.Minute, func() bool {
		code, body := healthz(t, base)
		return code == http.StatusOK && strings.Contains(body, "silent: leader, streaming; "+want)
	})
	_, body := healthz(t, base)
	t.Logf("/healthz after: %q", body)
	if got := value(t, scrape(t, base), "walcast_stream_receive_timeouts_total", map[string]string{"pipeline": "silent"}); got != float64(rounds) {
		t.Errorf("walcast_stream_receive_timeouts_total = %v, want %d", got, rounds)
	}
	// The leader reports its streams every 2 s: wait for the report that
	// counts the last silence.
	line := fmt.Sprintf("replication stream of slot walcast_silent: streaming, receive_timeout 4s; the leader ended %d silent stream(s) and reconnected", rounds)
	var out string
	waitFor(t, "walcast status to report the silent streams", time.Minute, func() bool {
		out, _ = walcastCLI(t, "status", pipeline)
		return strings.Contains(out, line)
	})
	t.Logf("walcast status:\n%s", out)
	var rep statusReport
	js, _ := walcastCLI(t, "status", pipeline, "--json")
	if err := json.Unmarshal([]byte(js), &rep); err != nil {
		t.Fatalf("walcast status --json: %v\n%s", err, js)
	}
	if len(rep.Streams) != 1 || rep.Streams[0].ReceiveTimeouts != int64(rounds) || rep.Streams[0].LastReceiveTimeout == nil || rep.Streams[0].ReceiveTimeoutSeconds != 4 {
		t.Errorf("walcast status --json streams = %+v, want one with %d receive timeouts", rep.Streams, rounds)
	}
	if strings.Contains(proc.logText(), "leadership lost") {
		t.Error("the leadership was lost: only the replication connection was silenced")
	}

	w.finish(t)
	all := w.written.Load()
	waitFor(t, "every committed change to arrive", 2*time.Minute, func() bool { return int64(rcv.distinct()) >= all })
	proc.stop()
	dups := verify(t, truth(t, db, "truth_silent", map[string]bool{"public.items": true}), rcv.events())
	t.Logf("%d changes, %d silences, %d redelivered", all, rounds, dups)
}

// TestSilentStreamIdleIsNotCut: a healthy stream with nothing to send is
// never ended, even with a receive timeout of 2 s and a server that sends
// no keepalive of its own (wal_sender_timeout = 0): the keepalives the
// stream asks for keep it alive. Idle for several timeouts, then a change
// still arrives on the same walsender.
func TestSilentStreamIdleIsNotCut(t *testing.T) {
	direct, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "idle_silent", pgtest.WithOptions(t, direct, "-c wal_sender_timeout=0"), []string{"public.items"},
		sinkSpec{ID: "hook", URL: rcv.URL})
	withSource(t, pipeline, "  receive_timeout = \"2s\"\n")
	proc := startWalcast(t, pipeline, "--metrics-listen", "127.0.0.1:0")
	base := metricsBase(t, proc)
	proc.waitLog(t, "streaming from slot")
	if !strings.Contains(proc.logText(), "receive_timeout=2s") {
		t.Fatalf("receive_timeout from the source block not used:\n%s", proc.logText())
	}
	walsender := func() (pid int) {
		db.QueryRow(context.Background(), `SELECT coalesce(active_pid, 0) FROM pg_replication_slots WHERE slot_name = 'walcast_idle_silent'`).Scan(&pid)
		return pid
	}
	waitFor(t, "the slot to be streamed", time.Minute, func() bool { return walsender() != 0 })
	pid := walsender()
	idle := time.Duration(pgtest.Chaos(t, 6)) * 2 * time.Second
	for end := time.Now().Add(idle); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if got := walsender(); got != pid {
			t.Fatalf("the walsender changed from %d to %d while the source was idle", pid, got)
		}
		if strings.Contains(proc.logText(), silentLine) {
			t.Fatalf("an idle, healthy stream was ended:\n%s", proc.logText())
		}
	}
	exec1(t, db, `INSERT INTO items VALUES (1, 1)`)
	waitFor(t, "a change after the idle time", time.Minute, func() bool { return rcv.distinct() == 1 })
	if got := walsender(); got != pid {
		t.Fatalf("the walsender changed from %d to %d", pid, got)
	}
	if n := countLines(proc.logText(), "streaming from slot"); n != 1 {
		t.Errorf("the stream started %d times, want once", n)
	}
	if got := value(t, scrape(t, base), "walcast_stream_receive_timeouts_total", map[string]string{"pipeline": "idle_silent"}); got != 0 {
		t.Errorf("walcast_stream_receive_timeouts_total = %v, want 0", got)
	}
	t.Logf("idle for %s with receive_timeout 2s and wal_sender_timeout 0: one stream, walsender %d throughout", idle, pid)
	proc.stop()
}

// TestProxySilentCatchupStream: the catch-up stream of a detached sink
// goes silent (with the pipeline's); it is ended and reconnected like the
// pipeline's stream, counted for its sink, and the sink still gets every
// committed change.
func TestProxySilentCatchupStream(t *testing.T) {
	direct, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)`)
	truthSlot(t, direct, db, "truth_silent_cu")
	proxy := cluster.Proxy(t)
	dsn := pgtest.WithOptions(t, proxy.DSN(direct), "-c wal_sender_timeout=2s")
	fast, slow := newReceiver(t), newReceiver(t)
	slow.setMode(modeHang)
	pipeline := writePipeline(t, "silent_cu", dsn, []string{"public.items"},
		sinkSpec{ID: "fast", URL: fast.URL, Batch: 200},
		sinkSpec{ID: "slow", URL: slow.URL, Batch: 100})
	cuSlot := isolate.SlotName("walcast_silent_cu", "slow")
	proc := startWalcast(t, pipeline, "--metrics-listen", "127.0.0.1:0")
	base := metricsBase(t, proc)
	proc.waitLog(t, "streaming from slot")
	// More changes than the detached sink's queue and look-ahead hold
	// (about 5,000 events), so that the catch-up stream cannot have read
	// them all before the silence and rejoin with what it had.
	exec1(t, db, `INSERT INTO items SELECT g, 0 FROM generate_series(1, 20000) g`)
	proc.waitLog(t, "sink catching up")
	// The catch-up stream reads until the sink's queue is full, then waits
	// for the hanging sink: blocked, it reads nothing, and that is not
	// silence. Silenced meanwhile (with the pipeline's stream), it drains
	// what it had once the sink answers, then hears nothing more.
	waitFor(t, "the catch-up stream to stream", time.Minute, func() bool {
		return regexp.MustCompile(`streaming from slot".* slot=` + cuSlot + ` `).MatchString(proc.logText())
	})
	// At least the pipeline's and the catch-up stream's; on a loaded
	// machine the fast sink may be detached too, or its rejoined catch-up
	// connection not yet closed.
	if n := proxy.SilenceReplication(); n < 2 {
		t.Fatalf("silenced %d replication connections, want at least 2 (the pipeline's and the catch-up stream's)", n)
	}
	exec1(t, db, `INSERT INTO items SELECT g, 1 FROM generate_series(100001, 100200) g`)
	slow.setMode(modeOK)
	want := truth(t, db, "truth_silent_cu", map[string]bool{"public.items": true})
	waitArrived(t, fmt.Sprintf("of the %d committed changes (the last 200 while the connections were silent), the fast sink", len(want)),
		func() int64 { return int64(fast.distinct()) }, int64(len(want)))
	waitArrived(t, fmt.Sprintf("of the %d committed changes (the last 200 while the connections were silent), the detached sink", len(want)),
		func() int64 { return int64(slow.distinct()) }, int64(len(want)))
	if !regexp.MustCompile(silentLine + `.* slot=` + cuSlot + ` silent_for=`).MatchString(proc.logText()) {
		t.Errorf("no warning that the catch-up stream of slot %s was ended for silence", cuSlot)
	}
	mf := scrape(t, base)
	if got := value(t, mf, "walcast_sink_catchup_receive_timeouts_total", map[string]string{"pipeline": "silent_cu", "sink": "slow"}); got < 1 {
		t.Errorf("walcast_sink_catchup_receive_timeouts_total{sink=slow} = %v, want at least 1", got)
	}
	if got := value(t, mf, "walcast_stream_receive_timeouts_total", map[string]string{"pipeline": "silent_cu"}); got != 1 {
		t.Errorf("walcast_stream_receive_timeouts_total = %v, want 1", got)
	}
	proc.stop()
	verify(t, want, fast.events())
	verify(t, want, slow.events())
}
