package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
)

// The nats and redis paths: the daemon drains into a real server started
// for the run (Debian's nats-server with JetStream on file storage, and
// redis-server with appendonly and fsync every second, Redis's usual
// durable setting), whose CPU is reported as ServerCPU; afterwards the
// destination must hold every change once.

// destination is a server a path delivers to.
type destination struct {
	cmd  *exec.Cmd
	addr string
}

// startDestination starts the server of path p with its data under dir.
func startDestination(ctx context.Context, p, dir string) (*destination, error) {
	d := &destination{addr: freeAddr()}
	if d.addr == "" {
		return nil, fmt.Errorf("no free port for the %s server", p)
	}
	host, port, _ := net.SplitHostPort(d.addr)
	switch p {
	case PathNATS:
		conf := filepath.Join(dir, "nats.conf")
		body := fmt.Sprintf("listen: %q\njetstream { store_dir: %q }\n", d.addr, filepath.Join(dir, "js"))
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			return nil, err
		}
		d.cmd = exec.CommandContext(ctx, "nats-server", "-c", conf)
	case PathRedis:
		d.cmd = exec.CommandContext(ctx, "redis-server", "--port", port, "--bind", host, "--dir", dir, "--save", "",
			"--appendonly", "yes", "--appendfsync", "everysec", "--protected-mode", "no")
	}
	log, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	d.cmd.Stdout, d.cmd.Stderr = log, log
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the %s server (make tools installs it): %w", p, err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := net.DialTimeout("tcp", d.addr, time.Second)
		if err == nil {
			c.Close()
			return d, nil
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("the %s server did not listen on %s within 30s", p, d.addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (d *destination) stop() { d.cmd.Process.Kill(); d.cmd.Wait() }

// sink is the pipeline's sink block for the destination.
func (d *destination) sink(p string) string {
	if p == PathNATS {
		return fmt.Sprintf(`sink "nats" "nats" {
  config {
    servers = ["nats://%s"]
  }
}`, d.addr)
	}
	return fmt.Sprintf(`sink "redis" "redis" {
  config {
    address = %q
  }
}`, d.addr)
}

// count is how many events the destination holds.
func (d *destination) count(ctx context.Context, p string) (int64, error) {
	if p == PathRedis {
		c := redis.NewClient(&redis.Options{Addr: d.addr, Protocol: 2, DisableIdentity: true})
		defer c.Close()
		return c.XLen(ctx, "walcast:public.bench").Result()
	}
	nc, err := nats.Connect("nats://" + d.addr)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	s, err := js.Stream(ctx, "WALCAST")
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int64(info.State.Msgs), nil
}

// drainDestination drains slot through the daemon into path p's server.
func (e *env) drainDestination(ctx context.Context, poll *pgx.Conn, p, slot string, run int) (Drain, error) {
	dir, err := os.MkdirTemp(e.work, p+"-")
	if err != nil {
		return Drain{}, err
	}
	defer os.RemoveAll(dir)
	dest, err := startDestination(ctx, p, dir)
	if err != nil {
		return Drain{}, err
	}
	defer dest.stop()
	d := daemonRun{name: fmt.Sprintf("%s_%d", strings.ReplaceAll(p, "-", "_"), run), slot: slot, sink: dest.sink(p)}
	r, err := e.runDaemon(ctx, poll, d)
	if err != nil {
		return r, err
	}
	r.ServerCPU, _ = readProcCPU(dest.cmd.Process.Pid)
	r.ServerCPUPerChange = r.ServerCPU / float64(e.changes) * 1e6
	n, err := dest.count(ctx, p)
	if err != nil {
		return r, fmt.Errorf("count what the %s server holds: %w", p, err)
	}
	if n != int64(e.changes) {
		return r, fmt.Errorf("the %s server holds %d events, want %d", p, n, e.changes)
	}
	return r, nil
}
