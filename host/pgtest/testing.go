package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// Main runs a test package against one shared cluster: it starts the
// cluster, stores it in *c, runs the tests and removes the cluster.
//
//	var cluster *pgtest.Cluster
//	func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }
func Main(m *testing.M, c **Cluster) {
	os.Exit(runMain(m, c))
}

func runMain(m *testing.M, c **Cluster) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cl, err := Start(ctx, Options{})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgtest: start PostgreSQL:", err)
		return 1
	}
	defer cl.Close()
	*c = cl
	return m.Run()
}

// New starts a cluster of its own for one test (for tests that restart or
// crash PostgreSQL) and removes it when the test ends.
func New(t testing.TB, opts Options) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("start PostgreSQL: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Database creates a fresh database for one test and returns its DSN.
func (c *Cluster) Database(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn, err := c.CreateDatabase(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// WithOptions returns dsn (a URL, as DSN returns) with server settings for
// every session it opens, the way libpq's options parameter passes them
// ("-c wal_sender_timeout=2s").
func WithOptions(t testing.TB, dsn, options string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("parse dsn: %v", err)
	}
	if u.RawQuery != "" {
		u.RawQuery += "&"
	}
	// %20, not +: libpq-style URLs do not read + as a space.
	u.RawQuery += "options=" + strings.ReplaceAll(url.QueryEscape(options), "+", "%20")
	return u.String()
}
