package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsServer is a real nats-server (Debian's package, installed by `make
// tools`) with JetStream, on a free 127.0.0.1 port, its store in a
// temporary directory (kept across restarts).
type natsServer struct {
	t    testing.TB
	addr string
	dir  string
	conf string
	cmd  *exec.Cmd
}

// needNATS returns nats-server's path. In CI a missing server fails the
// test: `make tools` installs it.
func needNATS(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("nats-server")
	if err == nil {
		return path
	}
	msg := "nats-server not found: run `make tools` (apt-get install -y nats-server)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// startNATS starts a server; extra is more of its configuration file
// ("max_payload: 65536", an authorization block).
func startNATS(t testing.TB, extra string) *natsServer {
	t.Helper()
	needNATS(t)
	s := &natsServer{t: t, addr: freeAddr(t), dir: t.TempDir()}
	s.conf = filepath.Join(s.dir, "nats.conf")
	conf := fmt.Sprintf("listen: %q\njetstream { store_dir: %q }\n%s\n", s.addr, filepath.Join(s.dir, "js"), extra)
	if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *natsServer) url() string { return "nats://" + s.addr }

func (s *natsServer) start() {
	s.t.Helper()
	s.cmd = exec.Command("nats-server", "-c", s.conf)
	logPath := filepath.Join(s.dir, "nats-"+strconv.FormatInt(time.Now().UnixNano(), 10)+".log")
	log, err := os.Create(logPath)
	if err != nil {
		s.t.Fatal(err)
	}
	defer log.Close()
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start nats-server: %v", err)
	}
	// No goroutine waits for it (the conformance suite counts
	// goroutines): stop reaps it. Ready once JetStream answers.
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := s.ping()
		if err == nil {
			return
		}
		if exited(s.cmd.Process.Pid) || time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			s.t.Fatalf("nats-server on %s not ready: %v\n%s", s.addr, err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ping is nil once a client can connect and JetStream answers.
func (s *natsServer) ping() error {
	c, err := net.DialTimeout("tcp", s.addr, time.Second)
	if err != nil {
		return err
	}
	c.Close()
	return nil
}

// exited reports whether pid is a zombie, waiting to be reaped.
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err != nil || strings.Contains(string(b), ") Z ")
}

// stop kills the server (SIGKILL: what a crash does) and reaps it.
func (s *natsServer) stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGCONT)
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

func (s *natsServer) restart() { s.stop(); s.start() }

// pause stops the server answering (SIGSTOP) until the returned function
// is called.
func (s *natsServer) pause() func() {
	s.cmd.Process.Signal(syscall.SIGSTOP)
	waitStopped(s.t, s.cmd.Process.Pid)
	return func() {
		if s.cmd != nil {
			s.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
}

// reader is an independent JetStream client of the test.
func (s *natsServer) reader(t testing.TB, opts ...nats.Option) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(s.url(), opts...)
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

// readOnce reads stream over a connection of its own, closed before it
// returns.
func (s *natsServer) readOnce(t testing.TB, stream string) []stored {
	t.Helper()
	nc, err := nats.Connect(s.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return readStream(t, js, stream)
}

// stored is one message as the stream holds it.
type stored struct {
	Subject string
	ID      string // Nats-Msg-Id
	Data    string
}

// readStream reads every message of stream by sequence.
func readStream(t testing.TB, js jetstream.JetStream, stream string) []stored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []stored
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("get %s seq %d: %v", stream, seq, err)
		}
		out = append(out, stored{Subject: m.Subject, ID: m.Header.Get(jetstream.MsgIDHeader), Data: string(m.Data)})
	}
	return out
}

// freeAddr is a 127.0.0.1 address whose port was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitStopped waits until a SIGSTOP took effect: kill returns before the
// process stops, and a server can still answer a request meanwhile.
func waitStopped(t testing.TB, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); err == nil && i >= 0 && strings.HasPrefix(s[i+1:], " T") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not stop within 10s of SIGSTOP", pid)
		}
		time.Sleep(time.Millisecond)
	}
}
