package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

var cluster *Cluster

func TestMain(m *testing.M) { Main(m, &cluster) }

func TestClusterIsLogical(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, cluster.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var level string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level != "logical" {
		t.Fatalf("wal_level = %q, want logical", level)
	}
}

// TestStandby: a standby streams the primary's writes and is in recovery
// until promoted.
func TestStandby(t *testing.T) {
	ctx := context.Background()
	s, err := cluster.Standby(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	primary, err := pgx.Connect(ctx, cluster.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Close(ctx)
	if _, err := primary.Exec(ctx, `CREATE TABLE IF NOT EXISTS standby_probe (v int); INSERT INTO standby_probe VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	standby, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Close(ctx)
	var recovering bool
	if err := standby.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&recovering); err != nil || !recovering {
		t.Fatalf("standby in recovery: %v, %v", recovering, err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var n int
		err := standby.QueryRow(ctx, `SELECT count(*) FROM standby_probe`).Scan(&n)
		if err == nil && n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby never replayed the primary's insert: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := s.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&recovering); err != nil || recovering {
		t.Fatalf("promoted standby in recovery: %v, %v", recovering, err)
	}
}
