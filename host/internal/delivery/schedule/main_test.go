package schedule

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/pgtest"
)

// Most tests of this package need no database; the few that use the real
// walcast.parked share one cluster, started by the first of them.
var (
	clusterOnce sync.Once
	cluster     *pgtest.Cluster
	clusterErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cluster != nil {
		cluster.Close()
	}
	os.Exit(code)
}

// pgDatabase returns a pool on a fresh database of the shared cluster,
// closed when the test ends.
func pgDatabase(t *testing.T) *pgxpool.Pool {
	t.Helper()
	clusterOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cluster, clusterErr = pgtest.Start(ctx, pgtest.Options{})
	})
	if clusterErr != nil {
		t.Fatalf("start PostgreSQL: %v", clusterErr)
	}
	pool, err := pgxpool.New(context.Background(), cluster.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
