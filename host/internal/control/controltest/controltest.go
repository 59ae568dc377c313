// Package controltest gives the tests of the control packages a database
// of their own with the walcast schema. It is imported by tests only.
package controltest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/control/schema"
	"github.com/walcast/walcast/host/pgtest"
)

// Migrated returns a pool on a fresh database of cluster with the walcast
// schema migrated; the pool is closed when the test ends.
func Migrated(t testing.TB, cluster *pgtest.Cluster) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), cluster.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := schema.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}
