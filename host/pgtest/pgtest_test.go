package pgtest

import (
	"context"
	"testing"

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
