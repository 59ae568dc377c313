package pgtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestProxySilencesReplicationOnly: through the proxy both kinds of
// connection work; silenced, the replication connection answers nothing
// (and is not closed), while a normal connection and a new replication
// connection still work.
func TestProxySilencesReplicationOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := cluster.Proxy(t)
	dsn := p.DSN(cluster.Database(t))
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	repl := func() *pgconn.PgConn {
		cfg, err := pgconn.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.RuntimeParams["replication"] = "database"
		rc, err := pgconn.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rc.Close(context.Background()) })
		return rc
	}
	identify := func(rc *pgconn.PgConn, within time.Duration) error {
		ictx, icancel := context.WithTimeout(ctx, within)
		defer icancel()
		_, err := rc.Exec(ictx, "IDENTIFY_SYSTEM").ReadAll()
		return err
	}
	rc := repl()
	if err := identify(rc, 10*time.Second); err != nil {
		t.Fatalf("replication connection through the proxy: %v", err)
	}
	if got := p.Replication(); got != 1 {
		t.Fatalf("proxy counted %d replication connections, want 1", got)
	}
	if n := p.SilenceReplication(); n != 1 {
		t.Fatalf("silenced %d connections, want 1", n)
	}
	if err := identify(rc, time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("silenced replication connection: got %v, want no answer (deadline exceeded)", err)
	}
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("normal connection after the silence: %v", err)
	}
	if err := identify(repl(), 10*time.Second); err != nil {
		t.Fatalf("new replication connection after the silence: %v", err)
	}
}

// TestProxyFaultsByBackend: the proxy learns each connection's backend
// pid; silencing one backend leaves the others working, a reset ends the
// connection at once on both sides (the client gets an error, the server's
// backend exits), and a delay slows every round trip from then on.
func TestProxyFaultsByBackend(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := cluster.Proxy(t)
	direct := cluster.Database(t)
	dsn := p.DSN(direct)
	open := func() (*pgx.Conn, int) {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		return conn, int(conn.PgConn().PID())
	}
	ping := func(conn *pgx.Conn, within time.Duration) error {
		qctx, qcancel := context.WithTimeout(ctx, within)
		defer qcancel()
		var one int
		return conn.QueryRow(qctx, "SELECT 1").Scan(&one)
	}
	backend := func(pid int) func(Conn) bool { return func(c Conn) bool { return c.PID == pid } }
	silent, silentPID := open()
	other, _ := open()
	if n := p.Silence(backend(silentPID)); n != 1 {
		t.Fatalf("silenced %d connections of backend %d, want 1", n, silentPID)
	}
	if err := ping(silent, time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("silenced connection: got %v, want no answer (deadline exceeded)", err)
	}
	if err := ping(other, 10*time.Second); err != nil {
		t.Fatalf("another connection after one backend was silenced: %v", err)
	}

	reset, resetPID := open()
	if n := p.Reset(backend(resetPID)); n != 1 {
		t.Fatalf("reset %d connections of backend %d, want 1", n, resetPID)
	}
	if err := ping(reset, 10*time.Second); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("reset connection: got %v, want an error at once", err)
	}
	db, err := pgx.Connect(ctx, direct)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	for {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, resetPID).Scan(&n); err != nil {
			t.Fatalf("backend %d still runs after its connection was reset: %v", resetPID, err)
		}
		if n == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A delay is felt on every round trip (a lower bound: load only adds
	// to it).
	const d = 100 * time.Millisecond
	p.Delay(d)
	start := time.Now()
	if err := ping(other, 30*time.Second); err != nil {
		t.Fatalf("delayed connection: %v", err)
	}
	if took := time.Since(start); took < 2*d {
		t.Fatalf("a round trip through a proxy delaying each way by %s took %s", d, took)
	}
	p.Delay(0)
}
