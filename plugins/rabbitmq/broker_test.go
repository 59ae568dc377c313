package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The package's tests run against one RabbitMQ broker started by TestMain
// (it takes ~15 s to boot): Debian's rabbitmq-server, run by hand with its
// own node name, ports, data and log directories and Erlang cookie under a
// temporary directory, so that it touches nothing of a system broker.
// host/cli's amqp_server_test.go starts its own the same way.

// rabbitServer is where Debian's package puts the server script (the
// /usr/sbin wrapper would switch to the rabbitmq user and its /var/lib
// directories).
const rabbitServer = "/usr/lib/rabbitmq/bin/rabbitmq-server"

// maxMessageSize is the broker's max_message_size: small, so that a test
// can exceed it cheaply.
const maxMessageSize = 1 << 20

// broker is one running RabbitMQ node.
type broker struct {
	dir      string
	port     int // AMQP
	tlsPort  int // AMQP over TLS (tls_test.go)
	epmdPort int
	env      []string
	cmd      *exec.Cmd
	exited   chan struct{}
	// epmd is Erlang's port mapper for this node, on a port of its own:
	// started here in the foreground, rather than by the node as a
	// daemon that would outlive the test.
	epmd *exec.Cmd
}

var rabbit *broker

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	if _, err := os.Stat(rabbitServer); err != nil {
		if os.Getenv("CI") != "" {
			fmt.Fprintln(os.Stderr, "rabbitmq-server is not installed (make tools installs it):", err)
			return 1
		}
		fmt.Fprintln(os.Stderr, "SKIP: rabbitmq-server is not installed; run `make tools` as root (apt-get install rabbitmq-server python3-pika)")
		return 0
	}
	b, err := startBroker()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start RabbitMQ:", err)
		return 1
	}
	defer b.close()
	rabbit = b
	return m.Run()
}

// startBroker makes a node's directories and config and starts it.
func startBroker() (*broker, error) {
	dir, err := os.MkdirTemp("", "walcast-rabbitmq-")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	b := &broker{dir: dir, port: ports[0], epmdPort: ports[2], tlsPort: ports[3]}
	for _, d := range []string{"home", "mnesia", "log"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	conf := fmt.Sprintf(`listeners.tcp.default = 127.0.0.1:%d
loopback_users = none
disk_free_limit.absolute = 1MB
max_message_size = %d
log.console = false
log.file.level = info
`, b.port, maxMessageSize)
	tlsConf, err := writeTLSFiles(dir, b.tlsPort)
	if err != nil {
		return nil, fmt.Errorf("make the TLS listener's certificates: %w", err)
	}
	conf += tlsConf
	if err := os.WriteFile(filepath.Join(dir, "rabbitmq.conf"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "enabled_plugins"), []byte("[].\n"), 0o644); err != nil {
		return nil, err
	}
	if err := b.startEpmd(); err != nil {
		return nil, err
	}
	b.env = append(os.Environ(),
		"HOME="+filepath.Join(dir, "home"), // the Erlang cookie
		fmt.Sprintf("RABBITMQ_NODENAME=walcast%d@localhost", b.port),
		fmt.Sprintf("RABBITMQ_NODE_PORT=%d", b.port),
		fmt.Sprintf("RABBITMQ_DIST_PORT=%d", ports[1]),
		fmt.Sprintf("ERL_EPMD_PORT=%d", b.epmdPort),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "pid"),
	)
	if err := b.start(); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

// start runs the node and waits for its AMQP port.
func (b *broker) start() error {
	out, err := os.OpenFile(filepath.Join(b.dir, "server.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(rabbitServer)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = b.dir, b.env, out, out
	// Its own process group, so that kill takes the Erlang VM and its
	// helpers along; and gone with the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", rabbitServer, err)
	}
	b.cmd, b.exited = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(b.exited) }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		c, err := net.DialTimeout("tcp", b.addr(), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-b.exited:
			log, _ := os.ReadFile(filepath.Join(b.dir, "server.out"))
			return fmt.Errorf("rabbitmq-server exited before listening:\n%s", log)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("rabbitmq-server did not listen within 2 minutes")
		}
	}
}

// kill SIGKILLs the node: no shutdown, what it had not written is lost.
func (b *broker) kill() {
	if b.cmd == nil {
		return
	}
	syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
	<-b.exited
	b.cmd = nil
}

// freeze stops the node's processes (SIGSTOP); thaw resumes them.
func (b *broker) freeze() (thaw func()) {
	syscall.Kill(-b.cmd.Process.Pid, syscall.SIGSTOP)
	return func() { syscall.Kill(-b.cmd.Process.Pid, syscall.SIGCONT) }
}

// startEpmd starts the node's port mapper.
func (b *broker) startEpmd() error {
	epmd, _ := filepath.Glob("/usr/lib/erlang/erts-*/bin/epmd")
	if len(epmd) == 0 {
		return errors.New("no epmd under /usr/lib/erlang (the erlang-base package)")
	}
	b.epmd = exec.Command(epmd[0], "-port", fmt.Sprint(b.epmdPort))
	b.epmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := b.epmd.Start(); err != nil {
		return fmt.Errorf("start epmd: %w", err)
	}
	return nil
}

// close kills the node and its epmd, and removes its directory.
func (b *broker) close() {
	b.kill()
	if b.epmd != nil {
		b.epmd.Process.Kill()
		b.epmd.Wait()
	}
	os.RemoveAll(b.dir)
}

func (b *broker) addr() string { return fmt.Sprintf("127.0.0.1:%d", b.port) }

// url is the broker's AMQP URL as the default user.
func (b *broker) url() string { return fmt.Sprintf("amqp://guest:guest@%s/", b.addr()) }

func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// ctlOut runs rabbitmqctl against the node.
func (b *broker) ctl(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/usr/lib/rabbitmq/bin/rabbitmqctl", append([]string{"-n", fmt.Sprintf("walcast%d@localhost", b.port)}, args...)...)
	cmd.Env = b.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
