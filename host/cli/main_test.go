package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/walcast/walcast/host/pgtest"
)

// Shared by every test of the package: the binaries under test, built once
// from this checkout, and one PostgreSQL cluster (each test makes its own
// database in it).
var (
	binDir  string
	cluster *pgtest.Cluster
)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "walcast-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := buildBinaries(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	binDir = dir
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cluster, err = pgtest.Start(ctx, pgtest.Options{})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start PostgreSQL:", err)
		return 1
	}
	defer cluster.Close()
	return m.Run()
}

// parallel lets a test run beside the package's other parallel tests. Only
// tests that own everything they touch call it: their own database in the
// shared cluster, slots and pipelines named after the test, their own
// receivers, brokers and processes on ports the kernel picked. Tests that
// change cluster-wide state (roles, settings, restarts, other sessions'
// backends) or that measure timings stay serial; Go runs every serial test
// before the parallel ones start, so the two never overlap. Most of these
// tests wait on processes, PostgreSQL and the network, so two at a time
// finish in far less than twice the time. WALCAST_TEST_SERIAL=1 runs them
// one by one (to tell a race between tests from a bug in one).
func parallel(t *testing.T) {
	if os.Getenv("WALCAST_TEST_SERIAL") == "" {
		t.Parallel()
	}
}

// builtinSinks names the built-in sinks: every directory of plugins/ but
// internal/, the packages they share.
func builtinSinks(root string) []string {
	dirs, _ := filepath.Glob(filepath.Join(root, "plugins", "*"))
	var names []string
	for _, d := range dirs {
		if name := filepath.Base(d); name != "internal" {
			names = append(names, name)
		}
	}
	return names
}

// buildBinaries builds walcast and every built-in sink plugin into dir, the
// way `make build` lays them out in bin/.
func buildBinaries(dir string) error {
	root, err := filepath.Abs("../..")
	if err != nil {
		return err
	}
	targets := map[string]string{"walcast": "./cmd/walcast"}
	for _, name := range builtinSinks(root) {
		targets["walcast-sink-"+name] = "./plugins/" + name
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	// WALCAST_TEST_RACE=1 builds the binaries under test with the race
	// detector, to see how the host behaves when everything is several
	// times slower.
	if os.Getenv("WALCAST_TEST_RACE") == "1" {
		args = append(args, "-race")
	}
	for _, pkg := range targets {
		args = append(args, pkg)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	// go build -o dir names binaries after their package directory.
	for name, pkg := range targets {
		built := filepath.Join(dir, filepath.Base(pkg))
		if built != filepath.Join(dir, name) {
			if err := os.Rename(built, filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	return nil
}
