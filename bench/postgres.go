package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// PathPostgresMirror drains the workload through the postgres sink in
// mirror mode into a database of its own on the same cluster: a typed
// copy of the bench table (create_tables = false, as docs/sinks.md
// recommends), each batch one transaction with the sink's checkpoint. The
// target's backends are the destination server's CPU, reported as
// ServerCPU.
const PathPostgresMirror = "daemon-postgres-mirror"

// postgresMirror creates the run's target database and table, fills in
// d's sink block, and starts watching the target's backends. finish
// returns their CPU seconds and checks that the mirror holds the rows the
// source holds; cleanup drops the database.
func (e *env) postgresMirror(ctx context.Context, d *daemonRun, run int) (finish func(context.Context) (float64, error), cleanup func(), err error) {
	db := fmt.Sprintf("bench_mirror_%d", run)
	if _, err := e.conn.Exec(ctx, `CREATE DATABASE `+db); err != nil {
		return nil, nil, fmt.Errorf("create target database %s: %w", db, err)
	}
	cleanup = func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := e.conn.Exec(dctx, `DROP DATABASE `+db+` WITH (FORCE)`); err != nil {
			e.logf("drop target database %s: %v", db, err)
		}
	}
	dsn := e.cluster.DSN(db)
	target, err := pgx.Connect(ctx, dsn)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	defer target.Close(context.Background())
	if _, err := target.Exec(ctx, `CREATE TABLE bench (id bigint PRIMARY KEY, account int, name text, amount numeric(12,2), payload text, updated_at timestamptz)`); err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("create the target table: %w", err)
	}
	d.sink = fmt.Sprintf(`sink "postgres" "mirror" {
  config {
    dsn           = %q
    create_tables = false
  }
}`, dsn)
	w, err := e.watchBackends(ctx, db)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	drop := cleanup
	cleanup = func() { w.stop(); drop() }
	finish = func(ctx context.Context) (float64, error) {
		cpu := w.stop()
		return cpu, e.checkMirror(ctx, dsn)
	}
	return finish, cleanup, nil
}

// checkMirror compares the target's row count and sum of amounts with the
// source's: a cheap check that the run measured a complete mirror.
func (e *env) checkMirror(ctx context.Context, dsn string) error {
	const q = `SELECT count(*), coalesce(sum(amount), 0)::text FROM bench`
	var n, m int64
	var sum, msum string
	if err := e.conn.QueryRow(ctx, q).Scan(&n, &sum); err != nil {
		return err
	}
	target, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer target.Close(context.Background())
	if err := target.QueryRow(ctx, q).Scan(&m, &msum); err != nil {
		return err
	}
	if n != m || sum != msum {
		return fmt.Errorf("the mirror holds %d rows (amounts %s), the source %d (%s)", m, msum, n, sum)
	}
	return nil
}

// backendWatch samples the CPU of every client backend connected to one
// database, as long as each lives; a backend's last sample is its total.
type backendWatch struct {
	mu       sync.Mutex
	last     map[int]float64
	stopOnce sync.Once
	stopped  chan struct{}
	done     chan struct{}
}

func (e *env) watchBackends(ctx context.Context, db string) (*backendWatch, error) {
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return nil, err
	}
	w := &backendWatch{last: map[int]float64{}, stopped: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer conn.Close(context.Background())
		t := time.NewTicker(senderSample)
		defer t.Stop()
		for {
			w.sample(ctx, conn, db)
			select {
			case <-w.stopped:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w, nil
}

func (w *backendWatch) sample(ctx context.Context, conn *pgx.Conn, db string) {
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'`, db)
	if err != nil {
		return
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, pid := range pids {
		if cpu, err := readProcCPU(int(pid)); err == nil {
			w.last[int(pid)] = cpu
		}
	}
}

// stop ends the watch and returns the backends' CPU seconds.
func (w *backendWatch) stop() float64 {
	w.stopOnce.Do(func() { close(w.stopped) })
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	var sum float64
	for _, cpu := range w.last {
		sum += cpu
	}
	return sum
}
