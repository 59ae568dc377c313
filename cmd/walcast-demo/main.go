// Command walcast-demo shows walcast working end to end on a throwaway
// PostgreSQL: it starts a private cluster from the machine's binaries,
// creates a demo table, runs `walcast run` with a stdout sink and writes a
// few changes a second so that events visibly flow. With --sink postgres
// the pipeline also mirrors the table into a second database through the
// postgres sink, and the demo says every few seconds whether the mirror
// equals the source. Ctrl-C stops everything and removes the cluster.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/pgtest"
)

func main() { os.Exit(run()) }

// ordersTable is the demo table, in the source and, with --sink
// postgres, in the mirror: the postgres sink writes typed values into a
// table of the source's shape.
const ordersTable = `CREATE TABLE orders (
	id serial PRIMARY KEY, customer text NOT NULL, status text NOT NULL,
	total numeric(10,2) NOT NULL, tags text[], updated_at timestamptz NOT NULL DEFAULT now())`

// mirrorSink is the sink block --sink postgres adds.
const mirrorSink = `
sink "postgres" "mirror" {
  config {
    dsn           = env("WALCAST_MIRROR_DSN")
    create_tables = false
  }
}
`

const pipeline = `# written by walcast-demo
pipeline = "demo"

source "postgres" {
  dsn    = env("WALCAST_SOURCE_DSN")
  tables = ["public.orders"]
}

sink "stdout" "console" {
  delivery {
    batch_size = 10
  }
  config {}
}
`

func run() int {
	bin := flag.String("bin", "bin", "directory holding walcast and its plugins")
	duration := flag.Duration("duration", 0, "stop by itself after this long (0: until Ctrl-C)")
	port := flag.Int("port", 0, "TCP port on 127.0.0.1 for the throwaway PostgreSQL, to connect to it with psql (0: a free one)")
	sink := flag.String("sink", "stdout", "stdout, or postgres to also mirror the table into a second database")
	flag.Parse()
	if *port < 0 || *port > 65535 {
		fmt.Fprintf(os.Stderr, "walcast-demo: --port %d is not a TCP port\n", *port)
		return 2
	}
	if *sink != "stdout" && *sink != "postgres" {
		fmt.Fprintf(os.Stderr, "walcast-demo: --sink %q is not a demo sink: stdout or postgres\n", *sink)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if err := demo(ctx, *bin, *port, *sink == "postgres"); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintln(os.Stderr, "walcast-demo:", err)
		return 1
	}
	return 0
}

func demo(ctx context.Context, bin string, port int, mirrored bool) error {
	walcast, err := filepath.Abs(filepath.Join(bin, "walcast"))
	if err != nil {
		return err
	}
	if _, err := os.Stat(walcast); err != nil {
		return fmt.Errorf("%s not found: run `make build` first", walcast)
	}
	fmt.Fprintln(os.Stderr, "walcast-demo: starting a throwaway PostgreSQL (wal_level=logical)...")
	startCtx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cluster, err := pgtest.Start(startCtx, pgtest.Options{Port: port})
	cancel()
	if err != nil {
		if port != 0 {
			return fmt.Errorf("start PostgreSQL on port %d (DEMO_PORT): %w; is another server listening there? pick another port", port, err)
		}
		return err
	}
	defer func() {
		cluster.Close()
		fmt.Fprintln(os.Stderr, "walcast-demo: PostgreSQL stopped and removed")
	}()
	dsn, err := cluster.CreateDatabase(ctx, "demo")
	if err != nil {
		return err
	}
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer db.Close(context.Background())
	if _, err := db.Exec(ctx, ordersTable); err != nil {
		return fmt.Errorf("create demo table: %w", err)
	}
	text, env := pipeline, []string{"WALCAST_SOURCE_DSN=" + dsn}
	var mirror *pgx.Conn
	if mirrored {
		mdsn, conn, err := createMirror(ctx, cluster)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		mirror = conn
		text += mirrorSink
		env = append(env, "WALCAST_MIRROR_DSN="+mdsn)
		fmt.Fprintf(os.Stderr, "walcast-demo: mirror %s\n", mdsn)
	}
	file := filepath.Join(cluster.Dir, "demo.hcl")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "walcast-demo: source %s (from another terminal: psql %q)\nwalcast-demo: pipeline %s:\n%s\n", dsn, dsn, file, text)

	cmd := exec.Command(walcast, "run", file, "--plugin-dir", filepath.Dir(walcast))
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	// Its own process group, so Ctrl-C reaches it only through us and we
	// can stop it in order: writer first, then walcast.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start walcast: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	fmt.Fprintln(os.Stderr, "walcast-demo: writing a few changes a second; events print below. Press Ctrl-C to stop (the throwaway PostgreSQL is removed).")

	werr := write(ctx, db, mirror, exited)
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil && werr == nil {
			werr = fmt.Errorf("walcast: %w", err)
		}
	case <-time.After(40 * time.Second):
		cmd.Process.Kill()
		<-exited
	}
	return werr
}

// write makes a few changes a second until ctx ends or walcast exits;
// with a mirror, it compares the mirror with the source every few
// seconds.
func write(ctx context.Context, db, mirror *pgx.Conn, exited <-chan error) error {
	customers := []string{"ada", "grace", "linus", "barbara", "ken"}
	statuses := []string{"new", "paid", "shipped"}
	t := time.NewTicker(700 * time.Millisecond)
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-exited:
			return fmt.Errorf("walcast exited early: %v", err)
		case <-t.C:
		}
		if mirror != nil && n%7 == 6 {
			compare(ctx, db, mirror)
		}
		var err error
		switch {
		case n%5 == 4:
			_, err = db.Exec(ctx, `DELETE FROM orders WHERE id = (SELECT min(id) FROM orders)`)
		case n%2 == 1:
			_, err = db.Exec(ctx, `UPDATE orders SET status = $1, updated_at = now() WHERE id = (SELECT max(id) FROM orders)`,
				statuses[rand.IntN(len(statuses))])
		default:
			_, err = db.Exec(ctx, `INSERT INTO orders (customer, status, total, tags) VALUES ($1, 'new', $2, $3)`,
				customers[rand.IntN(len(customers))], fmt.Sprintf("%d.%02d", rand.IntN(200), rand.IntN(100)), []string{"demo"})
		}
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("write demo change: %w", err)
		}
	}
}

// createMirror creates the mirror database with the demo table in it and
// returns its DSN and a connection to it.
func createMirror(ctx context.Context, cluster *pgtest.Cluster) (string, *pgx.Conn, error) {
	dsn, err := cluster.CreateDatabase(ctx, "mirror")
	if err != nil {
		return "", nil, err
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "", nil, fmt.Errorf("connect to the mirror: %w", err)
	}
	if _, err := conn.Exec(ctx, ordersTable); err != nil {
		conn.Close(context.Background())
		return "", nil, fmt.Errorf("create the mirror's table: %w", err)
	}
	return dsn, conn, nil
}

// tableDigest is the same query on both sides: row count and a digest of
// every column of every row in key order.
const tableDigest = `SELECT count(*), coalesce(md5(string_agg(o::text, ',' ORDER BY id)), '') FROM orders o`

// compare prints whether the mirror holds the source's rows. The mirror
// trails by the time walcast takes to deliver, so "catching up" is normal
// right after a write; what it must never do is stay different.
func compare(ctx context.Context, src, mirror *pgx.Conn) {
	var n, m int64
	var a, b string
	if err := src.QueryRow(ctx, tableDigest).Scan(&n, &a); err != nil {
		return
	}
	if err := mirror.QueryRow(ctx, tableDigest).Scan(&m, &b); err != nil {
		return
	}
	if a == b {
		fmt.Fprintf(os.Stderr, "walcast-demo: mirror: %d rows in orders, equal to the source\n", m)
		return
	}
	fmt.Fprintf(os.Stderr, "walcast-demo: mirror: %d rows in orders, catching up with the source's %d\n", m, n)
}
