package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Options tunes a cluster. The zero value is what tests want.
type Options struct {
	// BinDir holds initdb, pg_ctl and postgres. Default: $WALCAST_PG_BIN,
	// else the newest /usr/lib/postgresql/*/bin, else `pg_config --bindir`.
	BinDir string
	// Settings are extra postgresql.conf lines ("name = value"), applied
	// after the defaults so they can override them.
	Settings []string
	// Durable keeps fsync on (for benchmarks that want realistic WAL cost).
	Durable bool
	// InitdbArgs are extra initdb arguments, e.g. "--wal-segsize=1" so
	// that a test can fill max_slot_wal_keep_size quickly.
	InitdbArgs []string
	// Port is the TCP port on 127.0.0.1 to listen on (the demo's
	// DEMO_PORT, for a client started by hand). 0: a free one.
	Port int
}

// Cluster is one running PostgreSQL server.
type Cluster struct {
	Dir  string // root of everything the cluster owns
	Data string // PGDATA
	Port int
	Host string // 127.0.0.1

	bin  string
	cred *syscall.Credential
	dbs  atomic.Int64
}

// Start initialises and starts a new cluster.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	bin, err := findBinDir(opts.BinDir)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "walcast-pg-")
	if err != nil {
		return nil, fmt.Errorf("create cluster directory: %w", err)
	}
	c := &Cluster{Dir: dir, Data: filepath.Join(dir, "data"), Host: "127.0.0.1", bin: bin}
	if err := c.init(ctx, opts); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

func (c *Cluster) init(ctx context.Context, opts Options) error {
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("running as root needs a postgres user to run initdb: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chmod(c.Dir, 0o755); err != nil {
			return err
		}
		if err := os.Chown(c.Dir, uid, gid); err != nil {
			return fmt.Errorf("hand cluster directory to postgres: %w", err)
		}
	}
	args := append([]string{"-D", c.Data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"}, opts.InitdbArgs...)
	if out, err := c.run(ctx, "initdb", args...); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	port := opts.Port
	if port == 0 {
		var err error
		if port, err = freePort(); err != nil {
			return err
		}
	}
	c.Port = port
	conf := []string{
		"listen_addresses = '127.0.0.1'",
		fmt.Sprintf("port = %d", port),
		fmt.Sprintf("unix_socket_directories = '%s'", c.Dir),
		"wal_level = logical",
		// One cluster serves a whole test package: its tests' slots (a
		// library stream's, a truth slot, catch-up slots) add up, and
		// host/cli runs tests side by side.
		"max_wal_senders = 60",
		"max_replication_slots = 100",
		"max_connections = 200",
		// Short, so that tests prove walcast answers keepalives even while
		// a sink is stuck: a client that does not would be cut off.
		"wal_sender_timeout = '5s'",
		"logging_collector = off",
		"log_min_messages = warning",
		"timezone = 'UTC'",
	}
	if !opts.Durable {
		// Crash tests kill processes, never the machine: durable enough.
		// synchronous_commit stays on so that a committed change is in
		// flushed WAL (what walsenders and test_decoding read) at once.
		conf = append(conf, "fsync = off", "full_page_writes = off")
	}
	conf = append(conf, opts.Settings...)
	f, err := os.OpenFile(filepath.Join(c.Data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open postgresql.conf: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteString("\n# walcast pgtest\n" + strings.Join(conf, "\n") + "\n"); err != nil {
		return fmt.Errorf("write postgresql.conf: %w", err)
	}
	return nil
}

// Start starts a stopped cluster and waits until it accepts connections.
func (c *Cluster) Start(ctx context.Context) error {
	logFile := filepath.Join(c.Dir, "postgres.log")
	if out, err := c.run(ctx, "pg_ctl", "-D", c.Data, "-l", logFile, "-w", "-t", "60", "start"); err != nil {
		tail, _ := os.ReadFile(logFile)
		return fmt.Errorf("pg_ctl start: %w\n%s\n%s", err, out, lastLines(tail, 20))
	}
	return nil
}

// Stop stops the cluster. Mode is "fast" or "immediate" (a crash).
func (c *Cluster) Stop(ctx context.Context, mode string) error {
	if out, err := c.run(ctx, "pg_ctl", "-D", c.Data, "-m", mode, "-w", "-t", "60", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop: %w\n%s", err, out)
	}
	return nil
}

// Restart stops the cluster with mode and starts it again on the same port.
func (c *Cluster) Restart(ctx context.Context, mode string) error {
	if err := c.Stop(ctx, mode); err != nil {
		return err
	}
	return c.Start(ctx)
}

// Close stops the cluster and removes its directory.
func (c *Cluster) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := c.Stop(ctx, "immediate")
	if rmErr := os.RemoveAll(c.Dir); rmErr != nil && err == nil {
		err = rmErr
	}
	return err
}

// DSN is a connection string for database db as the superuser.
func (c *Cluster) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@%s:%d/%s?sslmode=disable", c.Host, c.Port, db)
}

// CreateDatabase creates a new, uniquely named database and returns its DSN.
func (c *Cluster) CreateDatabase(ctx context.Context, prefix string) (string, error) {
	name := fmt.Sprintf("%s_%d_%d", sanitize(prefix), os.Getpid(), c.dbs.Add(1))
	conn, err := pgx.Connect(ctx, c.DSN("postgres"))
	if err != nil {
		return "", fmt.Errorf("connect to create database: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return c.DSN(name), nil
}

// BinDir is the directory of the PostgreSQL binaries the cluster runs.
func (c *Cluster) BinDir() string { return c.bin }

// Command builds a command for one of the PostgreSQL binaries (psql,
// pg_recvlogical, ...), run as the cluster's owner when we are root.
func (c *Cluster) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.Dir
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	return cmd
}

func (c *Cluster) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := c.Command(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return out.Bytes(), err
}

func findBinDir(dir string) (string, error) {
	if dir == "" {
		dir = os.Getenv("WALCAST_PG_BIN")
	}
	if dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err != nil {
			return "", fmt.Errorf("no initdb in %s: %w", dir, err)
		}
		return dir, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(matches, func(i, j int) bool { return pgMajor(matches[i]) > pgMajor(matches[j]) })
	if len(matches) > 0 {
		return filepath.Dir(matches[0]), nil
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries found: install postgresql (Debian: apt-get install postgresql) or set WALCAST_PG_BIN to the directory holding initdb")
}

func pgMajor(path string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return n
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	out := b.String()
	if len(out) > 40 {
		out = out[:40]
	}
	if out == "" {
		out = "db"
	}
	return out
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
