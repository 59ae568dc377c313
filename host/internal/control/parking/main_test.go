package parking

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/control/controltest"
	"github.com/walcast/walcast/host/pgtest"
)

var cluster *pgtest.Cluster

func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }

// initStore returns the parked events of pipeline in a migrated database
// of its own, and the pool it uses.
func initStore(t *testing.T, pipeline string) (*Store, *pgxpool.Pool) {
	t.Helper()
	pool := controltest.Migrated(t, cluster)
	return New(pool, pipeline), pool
}
