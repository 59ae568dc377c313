package host_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/pgtest"
)

var cluster *pgtest.Cluster

// exampleDSNEnv names the database the package examples use; TestMain
// points it at a fresh database of the test cluster.
const exampleDSNEnv = "WALCAST_EXAMPLE_DSN"

func TestMain(m *testing.M) {
	// The crash and memory tests run a consumer in a subprocess: this
	// same test binary, started with childEnv set.
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(childMain(mode))
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := pgtest.Start(ctx, pgtest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start PostgreSQL:", err)
		return 1
	}
	defer cl.Close()
	cluster = cl
	dsn, err := cl.CreateDatabase(ctx, "example")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := execSQL(ctx, dsn, `CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL, total numeric(10,2) NOT NULL)`); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	os.Setenv(exampleDSNEnv, dsn)
	return m.Run()
}

func execSQL(ctx context.Context, dsn string, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("exec %q: %w", sql, err)
	}
	return nil
}
