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

	"github.com/redis/go-redis/v9"
)

// redisServer is a real redis-server (Debian's package, installed by
// `make tools`) on a free 127.0.0.1 port, its data in a temporary
// directory, appendonly with fsync always so that a restart keeps every
// acknowledged write.
type redisServer struct {
	t    testing.TB
	addr string
	dir  string
	args []string
	cmd  *exec.Cmd
}

// needRedis returns redis-server's path. In CI a missing server fails the
// test: `make tools` installs it.
func needRedis(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err == nil {
		return path
	}
	msg := "redis-server not found: run `make tools` (apt-get install -y redis-server redis-tools)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// startRedis starts a server with extra configuration directives
// ("requirepass", "secret", ...).
func startRedis(t testing.TB, extra ...string) *redisServer {
	t.Helper()
	needRedis(t)
	s := &redisServer{t: t, addr: freeAddr(t), dir: t.TempDir()}
	_, port, _ := net.SplitHostPort(s.addr)
	s.args = append([]string{"--port", port, "--bind", "127.0.0.1", "--dir", s.dir, "--save", "",
		"--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning"}, extra...)
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *redisServer) start() {
	s.t.Helper()
	s.cmd = exec.Command("redis-server", s.args...)
	logPath := filepath.Join(s.dir, "redis-"+strconv.FormatInt(time.Now().UnixNano(), 10)+".log")
	log, err := os.Create(logPath)
	if err != nil {
		s.t.Fatal(err)
	}
	defer log.Close() // the child has its own descriptor
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	// No goroutine waits for it: the conformance suite counts goroutines,
	// and stop reaps the process.
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if exited(s.cmd.Process.Pid) || time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			s.t.Fatalf("redis-server %v did not listen on %s: %v\n%s", s.args, s.addr, err, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exited reports whether pid is a zombie, waiting to be reaped.
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err != nil || strings.Contains(string(b), ") Z ")
}

// stop kills the server (SIGKILL: what a crash does) and waits for it.
func (s *redisServer) stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot die
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

func (s *redisServer) restart() { s.stop(); s.start() }

// pause stops the server answering (SIGSTOP) until the returned function
// is called.
func (s *redisServer) pause() func() {
	s.cmd.Process.Signal(syscall.SIGSTOP)
	waitStopped(s.t, s.cmd.Process.Pid)
	return func() {
		if s.cmd != nil {
			s.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
}

// client is an independent go-redis client for the test's own reads and
// changes.
func (s *redisServer) client(t testing.TB, password string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.addr, Password: password, Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// entries reads a whole stream: each entry's fields.
func entries(t testing.TB, c *redis.Client, stream string) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs, err := c.XRange(ctx, stream, "-", "+").Result()
	if err != nil {
		t.Fatalf("XRANGE %s: %v", stream, err)
	}
	out := make([]map[string]any, len(msgs))
	for i, m := range msgs {
		out[i] = m.Values
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

// ids is the id field of each entry.
func ids(es []map[string]any) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = fmt.Sprint(e["id"])
	}
	return out
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
