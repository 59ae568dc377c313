// Command walcast-bench runs walcast's benchmark (what `make bench` runs):
// a private PostgreSQL, the workload waiting in fresh slots, then
// each path drains one — pg_recvlogical, library mode, the daemon with the
// stdout, webhook and kafka sinks — then a backfill and the isolation
// figures, and the figures are printed and written as JSON. See
// docs/benchmarks.md.
//
//	walcast-bench [-bin bin] [-scale 1] [-runs 5] [-paths a,b] [-latency-rates 5000,20000,40000,80000] [-out bench/out/results.json]
//
// The subcommands `library` and `daemon` are the processes the benchmark
// runs itself (a library-mode consumer; a profiled in-process daemon).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/walcast/walcast/bench"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		var err error
		switch args[0] {
		case "library":
			err = bench.Library(args[1:], stdout, stderr)
		case "daemon":
			err = bench.Daemon(args[1:], stdout, stderr)
		default:
			return runBench(args, stdout, stderr)
		}
		if err != nil {
			fmt.Fprintf(stderr, "walcast-bench %s: %v\n", args[0], err)
			return 1
		}
		return 0
	}
	return runBench(args, stdout, stderr)
}

func runBench(args []string, stdout, stderr io.Writer) int {
	def := bench.Default()
	fs := flag.NewFlagSet("walcast-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bin := fs.String("bin", "bin", "directory holding walcast, walcast-sink-*, walcast-kfake and walcast-bench")
	scale := fs.Float64("scale", 1, "multiply the workload (1,000,000 inserts, 200,000 updates, 100,000 deletes) and the big transaction by this")
	runs := fs.Int("runs", def.Runs, "drains per path; the median is reported")
	paths := fs.String("paths", strings.Join(bench.AllPaths, ","), "comma-separated paths to run")
	txSize := fs.Int("tx-size", def.TxSize, "rows per transaction of the workload")
	latRates := fs.String("latency-rates", joinInts(def.LatencyRates), "comma-separated changes/s of the latency curve")
	latSinks := fs.String("latency-sinks", strings.Join(def.LatencySinks, ","), "comma-separated sinks of the latency curve (webhook, kafka)")
	latDur := fs.Duration("latency-duration", def.LatencyDuration, "how long to write at each rate of the latency curve (0 skips it)")
	bigTx := fs.Int("big-tx", def.BigTx, "rows of the one-transaction memory test before -scale (0 skips it)")
	liveRate := fs.Int("backfill-live-rate", def.BackfillLiveRate, "single-row transactions/s committed while the backfill path backfills (0: the backfill alone)")
	out := fs.String("out", "bench/out/results.json", "where to write the results as JSON")
	work := fs.String("work", "", "keep pipeline files and daemon logs in this directory")
	profile := fs.String("profile", "", "write CPU and allocation profiles of the library consumer and of the daemon (run in-process) into this directory")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg := def
	cfg.BigTx = *bigTx
	cfg = cfg.Scale(*scale)
	cfg.BinDir, cfg.Runs, cfg.TxSize = *bin, *runs, *txSize
	rates, err := parseInts(*latRates)
	if err != nil {
		fmt.Fprintf(stderr, "walcast-bench: -latency-rates: %v\n", err)
		return 2
	}
	cfg.LatencyRates, cfg.LatencySinks, cfg.LatencyDuration = rates, strings.Split(*latSinks, ","), *latDur
	cfg.BackfillLiveRate = *liveRate
	cfg.Paths = strings.Split(*paths, ",")
	cfg.WorkDir, cfg.Log = *work, stderr
	if *profile != "" {
		if err := os.MkdirAll(*profile, 0o755); err != nil {
			fmt.Fprintln(stderr, "walcast-bench:", err)
			return 1
		}
		cfg.ProfileDir = *profile
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	res, err := bench.Run(ctx, cfg)
	if res != nil {
		res.WriteTable(stdout)
		if werr := res.WriteJSON(*out); werr != nil {
			fmt.Fprintln(stderr, "walcast-bench:", werr)
		} else {
			fmt.Fprintf(stdout, "\nwritten to %s (%s)\n", *out, time.Since(start).Round(time.Second))
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "walcast-bench:", err)
		return 1
	}
	return 0
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// parseInts reads a comma-separated list of positive integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number of changes per second", f)
		}
		out = append(out, n)
	}
	return out, nil
}
