package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A RabbitMQ broker for the rabbitmq sink's tests, and an independent
// client (Python's pika, from Debian) that drains what arrived. The broker
// takes ~15 s to boot, so TestRabbitMQ starts one and runs every check as
// its subtest. It is Debian's rabbitmq-server run by hand: its own node
// name, ports, data and log directories and Erlang cookie ($HOME) under a
// temporary directory, and its own epmd, so that nothing of a system
// broker is touched. (plugins/rabbitmq's tests start theirs the same way.)

const (
	rabbitServer = "/usr/lib/rabbitmq/bin/rabbitmq-server"
	// rabbitMaxMessage is the broker's max_message_size: small, so that a
	// row can exceed it cheaply.
	rabbitMaxMessage = 1 << 20
)

// rabbitBroker is one running RabbitMQ node.
type rabbitBroker struct {
	dir    string
	port   int
	env    []string
	cmd    *exec.Cmd
	exited chan struct{}
	epmd   *exec.Cmd
}

// needRabbit fails (in CI) or skips (by hand) when the broker or pika is
// missing: make tools installs both.
func needRabbit(t *testing.T) {
	t.Helper()
	var missing []string
	if _, err := os.Stat(rabbitServer); err != nil {
		missing = append(missing, "rabbitmq-server")
	}
	if exec.Command("/usr/bin/python3", "-c", "import pika").Run() != nil {
		missing = append(missing, "python3-pika")
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("%v not installed: run `make tools` as root (apt-get install rabbitmq-server python3-pika)", missing)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// startRabbit starts a broker for the test and stops it when the test ends.
func startRabbit(t *testing.T) *rabbitBroker {
	t.Helper()
	dir := t.TempDir()
	port, dist, epmdPort := freePort(t), freePort(t), freePort(t)
	b := &rabbitBroker{dir: dir, port: port}
	for _, d := range []string{"home", "mnesia", "log"} {
		os.MkdirAll(filepath.Join(dir, d), 0o700)
	}
	conf := fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\nloopback_users = none\ndisk_free_limit.absolute = 1MB\nmax_message_size = %d\nlog.console = false\n", port, rabbitMaxMessage)
	os.WriteFile(filepath.Join(dir, "rabbitmq.conf"), []byte(conf), 0o644)
	os.WriteFile(filepath.Join(dir, "enabled_plugins"), []byte("[].\n"), 0o644)
	epmd, _ := filepath.Glob("/usr/lib/erlang/erts-*/bin/epmd")
	if len(epmd) == 0 {
		t.Fatal("no epmd under /usr/lib/erlang (the erlang-base package)")
	}
	b.epmd = exec.Command(epmd[0], "-port", fmt.Sprint(epmdPort))
	b.epmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := b.epmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.epmd.Process.Kill(); b.epmd.Wait() })
	b.env = append(os.Environ(),
		"HOME="+filepath.Join(dir, "home"),
		fmt.Sprintf("RABBITMQ_NODENAME=walcast%d@localhost", port),
		fmt.Sprintf("RABBITMQ_NODE_PORT=%d", port),
		fmt.Sprintf("RABBITMQ_DIST_PORT=%d", dist),
		fmt.Sprintf("ERL_EPMD_PORT=%d", epmdPort),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "pid"),
	)
	b.start(t)
	t.Cleanup(b.kill)
	return b
}

func freePort(t testing.TB) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(freeAddr(t))
	var n int
	fmt.Sscan(port, &n)
	return n
}

// start runs the node (on its data of before, after a kill) and waits
// for its AMQP port.
func (b *rabbitBroker) start(t testing.TB) {
	t.Helper()
	out, err := os.OpenFile(filepath.Join(b.dir, "server.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(rabbitServer)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = b.dir, b.env, out, out
	// Its own process group, so that kill takes the Erlang VM along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", rabbitServer, err)
	}
	b.cmd, b.exited = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(b.exited) }()
	begin := time.Now()
	waitFor(t, "RabbitMQ to listen", 2*time.Minute, func() bool {
		select {
		case <-b.exited:
			log, _ := os.ReadFile(filepath.Join(b.dir, "server.out"))
			t.Fatalf("rabbitmq-server exited:\n%s", log)
		default:
		}
		c, err := net.DialTimeout("tcp", b.addr(), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	t.Logf("RabbitMQ listening on %s after %s", b.addr(), time.Since(begin).Round(100*time.Millisecond))
}

// kill SIGKILLs the node (no shutdown) and waits until its port is
// closed: the Erlang VM dies a moment after the script that started it.
func (b *rabbitBroker) kill() {
	if b.cmd == nil {
		return
	}
	syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
	<-b.exited
	b.cmd = nil
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", b.addr(), time.Second)
		if err != nil {
			return
		}
		c.Close()
	}
}

func (b *rabbitBroker) addr() string { return fmt.Sprintf("127.0.0.1:%d", b.port) }

// url is the broker's AMQP URL as its default user, guest.
func (b *rabbitBroker) url() string { return fmt.Sprintf("amqp://guest:guest@%s/", b.addr()) }

// rabbitConfig is the sink's config block for the broker.
func (b *rabbitBroker) rabbitConfig(exchange string) string {
	return fmt.Sprintf("    url = %q\n    exchange = %q\n", b.url(), exchange)
}

// queue declares a durable queue bound to exchange (declared as the sink
// does) for routing key, and returns a function that tells how many
// messages wait in it.
func (b *rabbitBroker) queue(t testing.TB, exchange, queue, key string) (depth func() int) {
	t.Helper()
	conn, err := amqp.Dial(b.url())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(queue, key, exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	return func() int {
		conn, err := amqp.Dial(b.url())
		if err != nil {
			return -1
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return -1
		}
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			return -1
		}
		return q.Messages
	}
}

// amqpMessage is one message as pika read it.
type amqpMessage struct {
	ID         string `json:"id"`
	RoutingKey string `json:"key"`
	Mode       int    `json:"mode"`
	Body       []byte `json:"body"` // base64 in pika's output
}

// pikaDrain is the independent reader: it consumes queue until it has been
// idle for two seconds and prints each message's properties and body.
const pikaDrain = `
import base64, json, sys, pika
conn = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
ch = conn.channel()
ch.basic_qos(prefetch_count=1000)
for m, props, body in ch.consume(sys.argv[2], auto_ack=True, inactivity_timeout=2):
    if m is None:
        break
    print(json.dumps({"id": props.message_id, "key": m.routing_key, "mode": props.delivery_mode,
                      "body": base64.b64encode(body).decode()}))
conn.close()
`

// drain reads every message of queue with pika.
func (b *rabbitBroker) drain(t testing.TB, queue string) []amqpMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "/usr/bin/python3", "-c", pikaDrain, b.url(), queue)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pika drain of %s: %v\n%s", queue, err, stderr.String())
	}
	var msgs []amqpMessage
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 16<<20), 16<<20)
	for sc.Scan() {
		var m amqpMessage
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("pika printed %q: %v", sc.Text(), err)
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// asEvents checks each message's properties against its body (persistent,
// message_id = the event id, routing key <schema>.<table>) and returns the
// events in arrival order.
func asEvents(t testing.TB, msgs []amqpMessage) []received {
	t.Helper()
	out := make([]received, 0, len(msgs))
	for _, m := range msgs {
		e, err := decodeEnvelope(m.Body)
		if err != nil {
			t.Fatalf("message %s: body is not an envelope: %v: %.200s", m.ID, err, m.Body)
		}
		ev, err := e.received(m.Body)
		if err != nil {
			t.Fatal(err)
		}
		if m.ID != e.ID || m.Mode != 2 || m.RoutingKey != e.Schema+"."+e.Table {
			t.Fatalf("message %s (delivery mode %d, routing key %s) of event %s: want message_id = the event id, persistent (2), routing key %s.%s",
				m.ID, m.Mode, m.RoutingKey, e.ID, e.Schema, e.Table)
		}
		out = append(out, ev)
	}
	return out
}
