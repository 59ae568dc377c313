package servertest

import (
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
)

// Config says which server to run and how.
type Config struct {
	// Binary is the server's executable, looked up in PATH ("nats-server").
	Binary string
	// Install names the Debian packages that bring Binary, for the
	// message when it is missing ("redis-server redis-tools").
	Install string
	// Args is the command line after Binary for a server listening on
	// addr (127.0.0.1:port) and keeping its files in dir; it may write a
	// configuration file into dir. It is called once: a restart runs the
	// same command line.
	Args func(addr, dir string) []string
}

// Server is a real server process of a test, on a 127.0.0.1 port that was
// free when it was chosen, its files in a temporary directory kept across
// restarts. No goroutine waits for the process (the conformance suite
// counts goroutines): Stop kills and reaps it, and t's cleanup calls Stop.
type Server struct {
	Addr string // host:port the server listens on
	Dir  string // its files: data, configuration, logs

	t    testing.TB
	bin  string
	args []string
	cmd  *exec.Cmd
}

// Need fails the test when the server's binary is missing in CI (`make
// tools` installs it) and skips it on a developer's machine.
func Need(t testing.TB, binary, install string) {
	t.Helper()
	if _, err := exec.LookPath(binary); err == nil {
		return
	}
	msg := fmt.Sprintf("%s not found: run `make tools` (apt-get install -y %s)", binary, install)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Start starts the server of c and returns once it accepts connections.
func Start(t testing.TB, c Config) *Server {
	t.Helper()
	Need(t, c.Binary, c.Install)
	s := &Server{t: t, Addr: FreeAddr(t), Dir: t.TempDir(), bin: c.Binary}
	s.args = c.Args(s.Addr, s.Dir)
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// Start starts the server again after Stop, with the same command line
// and directory, and returns once it accepts connections.
func (s *Server) Start() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, s.args...)
	logPath := filepath.Join(s.Dir, filepath.Base(s.bin)+"-"+strconv.FormatInt(time.Now().UnixNano(), 10)+".log")
	log, err := os.Create(logPath)
	if err != nil {
		s.t.Fatal(err)
	}
	defer log.Close() // the child has its own descriptor
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", s.bin, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if exited(s.cmd.Process.Pid) || time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			s.t.Fatalf("%s %v did not listen on %s: %v\n%s", s.bin, s.args, s.Addr, err, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server (SIGKILL: what a crash does) and reaps it.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot die
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Restart is Stop, then Start.
func (s *Server) Restart() { s.Stop(); s.Start() }

// Pause stops the server answering (SIGSTOP) until the returned function
// is called.
func (s *Server) Pause() (resume func()) {
	s.cmd.Process.Signal(syscall.SIGSTOP)
	waitStopped(s.t, s.cmd.Process.Pid)
	return func() {
		if s.cmd != nil {
			s.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
}

// FreeAddr is a 127.0.0.1 address whose port was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// exited reports whether pid is a zombie, waiting to be reaped.
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err != nil || strings.Contains(string(b), ") Z ")
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
