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
