package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/walcast/walcast/host/pgtest"
)

// The nats sink end to end: walcast, the plugin and a real nats-server
// with JetStream, read back by natsread (testdata/natsread), a separate
// program on the official nats.go client.

const natsItems = "walcast.public.items"

// natsConfig is the config block body of a nats sink.
func natsConfig(url string, extra ...string) string {
	s := fmt.Sprintf("    servers = [%q]\n    timeout = \"2s\"\n", url)
	for _, e := range extra {
		s += "    " + e + "\n"
	}
	return s
}

var (
	natsreadOnce sync.Once
	natsreadBin  string
	natsreadErr  error
)

// buildNatsread builds testdata/natsread into binDir once per test binary.
func buildNatsread(t testing.TB) string {
	t.Helper()
	natsreadOnce.Do(func() {
		out := filepath.Join(binDir, "natsread")
		cmd := exec.Command("go", "build", "-o", out, "./testdata/natsread")
		if b, err := cmd.CombinedOutput(); err != nil {
			natsreadErr = fmt.Errorf("go build ./testdata/natsread: %v\n%s", err, b)
			return
		}
		natsreadBin = out
	})
	if natsreadErr != nil {
		t.Fatal(natsreadErr)
	}
	return natsreadBin
}

// natsMessage is one message as natsread printed it.
type natsMessage struct {
	Seq     uint64              `json:"seq"`
	Subject string              `json:"subject"`
	MsgID   string              `json:"msg_id"`
	Headers map[string][]string `json:"headers"`
	Data    string              `json:"data"`
}

// readNATS reads stream with natsread and returns its messages as received
// events, in stream order, checking that each message's subject,
// Nats-Msg-Id and walcast headers agree with its envelope.
func readNATS(t testing.TB, srv *serverProc, stream string) []received {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, buildNatsread(t), "-server", "nats://"+srv.addr, "-stream", stream)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("natsread: %v\n%s", err, stderr.Bytes())
	}
	var got []received
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var m natsMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("natsread line %.200s: %v", sc.Text(), err)
		}
		env, err := decodeEnvelope([]byte(m.Data))
		if err != nil {
			t.Fatalf("message %d: not an envelope: %v", m.Seq, err)
		}
		r, err := env.received([]byte(m.Data))
		if err != nil {
			t.Fatal(err)
		}
		h := func(k string) string {
			if v := m.Headers[k]; len(v) > 0 {
				return v[0]
			}
			return ""
		}
		if (m.MsgID != env.ID && !strings.HasSuffix(m.MsgID, "/"+env.ID)) || h("walcast-id") != env.ID || h("walcast-op") != env.Op || h("walcast-table") != env.Schema+"."+env.Table || m.Subject != "walcast."+env.Schema+"."+env.Table {
			t.Fatalf("message %d: subject %s, headers %v disagree with the envelope", m.Seq, m.Subject, m.Headers)
		}
		got = append(got, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// natsCount is how many messages stream holds, through a client of the
// test's own; 0 while unknown. Progress only.
func natsCount(js jetstream.JetStream, stream string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0
	}
	return int(info.State.Msgs)
}

// natsClient is a JetStream client of the test's own, reconnecting for
// ever (the server restarts during some tests).
func natsClient(t testing.TB, srv *serverProc) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect("nats://"+srv.addr, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

var natsDropped = regexp.MustCompile(`msg="stream dropped events it already stored".* duplicates=(\d+)`)

// TestNATSCrashLoopExactlyOnce is the nats sink's promise under crashes:
// walcast is SIGKILLed five times while 20,000+ changes (inserts, updates,
// key changes, deletes, TRUNCATEs) are published — with publishes in
// flight, and between the stream's ack and walcast recording it — and
// nats-server itself is SIGKILLed and restarted once. Every redelivery
// comes within the stream's duplicate window (2 min), so the stream drops
// them: natsread reads every committed change exactly once, byte-identical,
// each row's changes in commit order, and applying the stream rebuilds
// the table.
func TestNATSCrashLoopExactlyOnce(t *testing.T) {
	parallel(t)
	start := time.Now()
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	srv := startNATSServer(t, "")
	js := natsClient(t, srv)
	res := runSinkCrashLoop(t, dsn, db, sinkLoop{
		name: "ncrash", kills: pgtest.Chaos(t, 5),
		sink:     sinkSpec{ID: "nats", SinkType: "nats", Batch: 20, Config: natsConfig("nats://" + srv.addr)},
		progress: func() int { return natsCount(js, "WALCAST") },
		afterKill: func(k int, p *walcastProc, _ string) string {
			if k != 3 {
				return ""
			}
			srv.stop(syscall.SIGKILL)
			srv.start()
			return "; nats-server SIGKILLed and restarted"
		},
	})
	got := readNATS(t, srv, "WALCAST")
	if dups := verify(t, res.want, got); dups != 0 {
		t.Fatalf("natsread read %d duplicates, want none within the duplicate window", dups)
	}
	checkKeyedMirror(t, db, got)
	t.Logf("%d changes, %d walcast SIGKILLs and a nats-server SIGKILL; the stream dropped %d redelivered events as duplicates; natsread read each change once, in %s",
		len(res.want), pgtest.Chaos(t, 5), sumLogged(res.logs, natsDropped), time.Since(start).Round(time.Second))
}

// TestNATSServerDownAtStart: walcast starts while nats-server is down;
// deliveries fail (retried, naming the servers) until it is up, then the
// stream is created and every change lands once.
func TestNATSServerDownAtStart(t *testing.T) {
	srv := startNATSServer(t, "")
	srv.stop(syscall.SIGKILL)
	var js jetstream.JetStream
	want := downAtStart(t, "ndown", sinkSpec{ID: "nats", SinkType: "nats", Batch: 20, Config: natsConfig("nats://" + srv.addr)},
		"NATS unreachable at start", func() { srv.start(); js = natsClient(t, srv) }, func() int { return natsCount(js, "WALCAST") })
	if dups := verify(t, want, readNATS(t, srv, "WALCAST")); dups != 0 {
		t.Fatalf("%d duplicates", dups)
	}
}

// TestNATSAuthRefused: credentials the server refuses stop walcast at
// start, naming the user and what to check, never the password.
func TestNATSAuthRefused(t *testing.T) {
	srv := startNATSServer(t, `authorization { users = [ { user: "walcast", password: "right-one" } ] }`)
	refusedAtStart(t, "nauth", sinkSpec{ID: "nats", SinkType: "nats", Config: natsConfig("nats://"+srv.addr, `username = "walcast"`, `password = "wrong-one"`)}, "wrong-one",
		`NATS refused authentication (as user "walcast")`, "check username and password")
}

// TestNATSWindowTooShort: a stream whose duplicate window is shorter than
// min_duplicate_window stops walcast at start, saying what to change.
func TestNATSWindowTooShort(t *testing.T) {
	srv := startNATSServer(t, "")
	js := natsClient(t, srv)
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "WALCAST", Subjects: []string{"walcast.>"}, Duplicates: 20 * time.Second}); err != nil {
		t.Fatal(err)
	}
	refusedAtStart(t, "nwindow", sinkSpec{ID: "nats", SinkType: "nats", Config: natsConfig("nats://" + srv.addr)}, "\x00",
		"stream WALCAST keeps message ids for 20s", "less than min_duplicate_window (2m0s)", "nats stream edit WALCAST --dupe-window 2m0s")
}

// TestNATSTooLargeParked: an event larger than the server's max_payload
// is parked at once, naming the limit; the rest is stored once.
func TestNATSTooLargeParked(t *testing.T) {
	srv := startNATSServer(t, "max_payload: 65536")
	want := tooLargeParked(t, "nlarge", sinkSpec{ID: "nats", SinkType: "nats", Config: natsConfig("nats://" + srv.addr)}, 100<<10, "max_payload")
	if dups := verify(t, want, readNATS(t, srv, "WALCAST")); dups != 0 {
		t.Fatalf("%d duplicates", dups)
	}
}

// TestNATSPastDuplicateWindow is what the nats sink says happens past the
// window: walcast is SIGKILLed mid-stream and restarted only after the
// stream's duplicate window (2 s here) has passed. Nothing is lost; the
// events walcast delivers again are stored a second time, byte-identical
// — and every one of them lies after what walcast.checkpoints held when
// it was killed: only what walcast had not recorded comes again.
func TestNATSPastDuplicateWindow(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	truthSlot(t, dsn, db, "truth_npast")
	srv := startNATSServer(t, "")
	js := natsClient(t, srv)
	pipeline := writePipeline(t, "npast", dsn, []string{"public.items"}, sinkSpec{ID: "nats", SinkType: "nats", Batch: 20,
		Config: natsConfig("nats://"+srv.addr, `duplicate_window = "2s"`, `min_duplicate_window = "2s"`)})
	proc := startCapturing(t, db, pipeline)
	for i := range 200 {
		exec1(t, db, `INSERT INTO items SELECT g, 0, 'x' FROM generate_series($1::int, $1::int + 49) g`, i*50+1)
	}
	waitFor(t, "half the events", time.Minute, func() bool { return natsCount(js, "WALCAST") >= 5000 })
	proc.kill()
	var host string
	db.QueryRow(context.Background(), `SELECT coalesce(max(event_id), '') FROM walcast.checkpoints WHERE pipeline = 'npast'`).Scan(&host)
	stored := natsCount(js, "WALCAST")
	time.Sleep(5 * time.Second) // the condition under test: the window (2 s) passes, and the server forgets the ids
	end := lsnQuery(t, db, `SELECT pg_current_wal_lsn()::text`)
	proc = startWalcast(t, pipeline)
	waitFor(t, "the slot to confirm everything", time.Minute, func() bool { return confirmedFlush(t, db, "walcast_npast") >= end })
	proc.stop()

	want := truthKeyed(t, db, "truth_npast", map[string]bool{"public.items": true})
	got := readNATS(t, srv, "WALCAST")
	dups := verify(t, want, got) // nothing lost, every copy byte-identical
	checkpoint := idOrZero(host)
	seen := map[string]bool{}
	for _, r := range got {
		if seen[r.ID.String()] && r.ID.Compare(checkpoint) <= 0 {
			t.Fatalf("event %s was stored twice although walcast.checkpoints (%s) covered it", r.ID, host)
		}
		seen[r.ID.String()] = true
	}
	if dups == 0 {
		t.Fatalf("no event came again past the window (%d stored at the kill, checkpoint %s): the test did not test what it claims", stored, host)
	}
	t.Logf("killed at %d messages stored, walcast.checkpoints %s; restarted past the 2 s window: %d events stored a second time, all after the checkpoint; %d changes, none lost",
		stored, host, dups, len(want))
}
