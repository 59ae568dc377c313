package backfill

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/control/schema"
	"github.com/walcast/walcast/host/pgtest"
)

// TestMigrateConcurrently: the daemon and a CLI command creating the backfill
// tables at the same moment both succeed.
func TestMigrateConcurrently(t *testing.T) {
	ctx := context.Background()
	cluster := pgtest.New(t, pgtest.Options{})
	for round := 0; round < 5; round++ {
		pool, err := pgxpool.New(ctx, cluster.Database(t))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 6)
		for range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- schema.Migrate(ctx, pool)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		pool.Close()
	}
}
