package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/walcast/walcast/host"
	"github.com/walcast/walcast/host/cli"
	"github.com/walcast/walcast/proto/sink/wire"
)

// Library is the library-mode consumer the harness runs as its own
// process (walcast-bench library ...): it opens the slot with host.Open,
// takes n events with Next, acks each one and does nothing else, then
// prints a JSON report (libraryReport) on stdout. With -rules the stream
// has the rules paths' filter and transform.
func Library(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("library", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("dsn", "", "source database")
	slot := fs.String("slot", "", "replication slot")
	pub := fs.String("publication", "", "publication")
	table := fs.String("table", "public.bench", "captured table")
	n := fs.Int64("n", 0, "events to take before stopping")
	profile := fs.String("profile", "", "write <prefix>.cpu.pprof and <prefix>.allocs.pprof")
	withRules := fs.Bool("rules", false, "with the rules paths' filter and transform (rules.go)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	stopProfile, err := startProfile(*profile)
	if err != nil {
		return err
	}
	ctx := context.Background()
	cfg := host.StreamConfig{DSN: *dsn, Tables: []string{*table}, Slot: *slot, Publication: *pub}
	if *withRules {
		cfg.Filter, cfg.Transform = benchFilter, libraryTransform()
	}
	s, err := host.Open(ctx, cfg)
	if err != nil {
		return err
	}
	var got int64
	var last time.Time
	for got < *n {
		ev, err := s.Next(ctx)
		if err != nil {
			s.Close(ctx)
			return fmt.Errorf("after %d events: %w", got, err)
		}
		if err := s.Ack(ev.ID); err != nil {
			s.Close(ctx)
			return err
		}
		got++
	}
	last = time.Now()
	if err := s.Close(ctx); err != nil {
		return err
	}
	stopProfile()
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return json.NewEncoder(stdout).Encode(libraryReport{
		Events: got, LastUnixN: last.UnixNano(), CPU: tv(ru.Utime) + tv(ru.Stime), MaxRSSKiB: ru.Maxrss,
	})
}

// Daemon runs a pipeline in this process exactly as `walcast run` does,
// with CPU and allocation profiles: walcast-bench daemon -profile PREFIX
// -plugin-dir DIR pipeline.hcl. SIGTERM stops it.
func Daemon(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
	fs.SetOutput(stderr)
	profile := fs.String("profile", "", "write <prefix>.cpu.pprof and <prefix>.allocs.pprof")
	pluginDir := fs.String("plugin-dir", "", "directory holding walcast-sink-* plugins")
	metrics := fs.String("metrics-listen", "", "serve /metrics on this address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: walcast-bench daemon [-profile PREFIX] [-plugin-dir DIR] pipeline.hcl")
	}
	stopProfile, err := startProfile(*profile)
	if err != nil {
		return err
	}
	defer stopProfile()
	if *profile != "" {
		// The plugin inherits WALCAST_PLUGIN_* variables and profiles
		// itself (pluginkit.Serve).
		os.Setenv(wire.EnvCPUProfile, *profile+".plugin.cpu.pprof")
	}
	// The same code path as `walcast run`, through the command line's own
	// entry point: the bench measures the product, not a copy of its wiring.
	args = []string{"run", fs.Arg(0), "--plugin-dir", *pluginDir, "--log-level", "warn"}
	if *metrics != "" {
		args = append(args, "--metrics-listen", *metrics)
	}
	if code := cli.Main("", args, stdout, stderr); code != 0 {
		return fmt.Errorf("walcast run exited %d", code)
	}
	return nil
}

// startProfile starts a CPU profile at prefix.cpu.pprof; the returned
// function stops it and writes prefix.allocs.pprof. While it runs,
// prefix.heap.pprof is rewritten whenever the live heap (as of the last
// GC) reaches a new high, so it shows what was held at the peak rather
// than what is left once the run has drained.
func startProfile(prefix string) (func(), error) {
	if prefix == "" {
		return func() {}, nil
	}
	f, err := os.Create(prefix + ".cpu.pprof")
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watchPeakHeap(prefix+".heap.pprof", done)
	}()
	return func() {
		close(done)
		<-watched
		pprof.StopCPUProfile()
		f.Close()
		runtime.GC()
		if a, err := os.Create(prefix + ".allocs.pprof"); err == nil {
			pprof.Lookup("allocs").WriteTo(a, 0)
			a.Close()
		}
	}, nil
}

// watchPeakHeap samples the live heap every 200ms until done is closed and
// writes a heap profile to path each time it grows past the previous peak.
func watchPeakHeap(path string, done <-chan struct{}) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	var peak uint64
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		metrics.Read(sample)
		if live := sample[0].Value.Uint64(); live > peak+peak/20 {
			peak = live
			if h, err := os.Create(path); err == nil {
				pprof.Lookup("heap").WriteTo(h, 0)
				h.Close()
			}
		}
	}
}
