// Command walcast-demo shows walcast working end to end on a throwaway
// PostgreSQL: it starts a private cluster from the machine's binaries,
// creates a demo table, runs `walcast run` with a stdout sink and writes a
// few changes a second so that events visibly flow. Ctrl-C stops
// everything and removes the cluster.
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
	flag.Parse()
	if *port < 0 || *port > 65535 {
		fmt.Fprintf(os.Stderr, "walcast-demo: --port %d is not a TCP port\n", *port)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if err := demo(ctx, *bin, *port); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintln(os.Stderr, "walcast-demo:", err)
		return 1
	}
	return 0
}

func demo(ctx context.Context, bin string, port int) error {
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
	if _, err := db.Exec(ctx, `CREATE TABLE orders (
		id serial PRIMARY KEY, customer text NOT NULL, status text NOT NULL,
		total numeric(10,2) NOT NULL, tags text[], updated_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("create demo table: %w", err)
	}
	file := filepath.Join(cluster.Dir, "demo.hcl")
	if err := os.WriteFile(file, []byte(pipeline), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "walcast-demo: source %s (from another terminal: psql %q)\nwalcast-demo: pipeline %s:\n%s\n", dsn, dsn, file, pipeline)

	cmd := exec.Command(walcast, "run", file, "--plugin-dir", filepath.Dir(walcast))
	cmd.Env = append(os.Environ(), "WALCAST_SOURCE_DSN="+dsn)
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

	werr := write(ctx, db, exited)
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

// write makes a few changes a second until ctx ends or walcast exits.
func write(ctx context.Context, db *pgx.Conn, exited <-chan error) error {
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
