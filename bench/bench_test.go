package bench

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var benchScale = flag.Float64("bench.scale", 0.05, "BenchmarkDrain: workload size as a fraction of the issue's (1 = 1,300,000 changes)")

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// buildBinaries builds walcast, its plugins, walcast-kfake and
// walcast-bench into one directory, as `make build` lays them out.
func buildBinaries(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "walcast-bench-bin-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", binDir+"/", "./cmd/walcast", "./cmd/walcast-bench", "./cmd/walcast-kfake")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = err
			tb.Logf("%s", out)
			return
		}
		plugins, _ := filepath.Glob("../plugins/*")
		for _, p := range plugins {
			name := filepath.Base(p)
			if name == "internal" { // the packages the sinks share
				continue
			}
			cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, "walcast-sink-"+name), "./plugins/"+name)
			cmd.Dir = ".."
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = err
				tb.Logf("%s", out)
				return
			}
		}
	})
	if buildErr != nil {
		tb.Fatalf("build binaries: %v", buildErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// TestSmoke runs the whole benchmark once at a tiny size, so that `make
// test` keeps it working. It checks that every path drained everything,
// not how fast.
func TestSmoke(t *testing.T) {
	cfg := Default()
	cfg.BigTx = 3000
	cfg = cfg.Scale(0.002)
	cfg.BinDir = buildBinaries(t)
	cfg.Runs = 1
	cfg.LatencyDuration = 500 * time.Millisecond
	cfg.LatencyRates = []int{500} // one rate through each sink
	var log strings.Builder
	cfg.Log = &log
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if drain, _ := splitIsolate(AllPaths); len(res.Paths)+len(res.Skipped) != len(drain) {
		t.Fatalf("%d paths measured and %d skipped, want %d", len(res.Paths), len(res.Skipped), len(drain))
	}
	for p, why := range res.Skipped {
		if p != PathConduit {
			t.Errorf("%s skipped: %s", p, why) // only a peer that is not installed may be
		}
		t.Logf("skipped %s: %s", p, why)
	}
	for _, p := range res.Paths {
		m := p.Median
		if m.ChangesPerSec <= 0 || m.HostRSSMiB <= 0 {
			t.Errorf("%s: %+v", p.Name, m)
		}
		if strings.HasPrefix(p.Name, "daemon-") && m.PluginRSSMiB <= 0 {
			t.Errorf("%s: no plugin measured: %+v", p.Name, m)
		}
		if strings.HasPrefix(p.Name, "daemon-") && m.EventsPerDeliver <= 0 {
			t.Errorf("%s: no Deliver calls read from the daemon's metrics: %+v", p.Name, m)
		}
		if (p.Name == PathNATS || p.Name == PathRedis || p.Name == PathPostgresMirror) && m.ServerCPU <= 0 {
			t.Errorf("%s: no destination server CPU measured: %+v", p.Name, m)
		}
		if _, fill := backfillVariants[p.Name]; !fill && (p.Best.ChangesPerSec < m.ChangesPerSec || m.StartupSeconds <= 0 || m.ActiveSeconds <= 0 || m.ActiveSeconds > m.Seconds) {
			t.Errorf("%s: best %+v, median %+v: the clock's parts do not add up", p.Name, p.Best, m)
		}
		if m.SenderCPU < 0 {
			t.Errorf("%s: walsender CPU %v", p.Name, m.SenderCPU)
		}
		for _, r := range p.Runs {
			if r.Events != 0 && r.Events < int64(res.Workload.Changes) {
				t.Errorf("%s: %d of %d events", p.Name, r.Events, res.Workload.Changes)
			}
			if _, fill := backfillVariants[p.Name]; fill && (r.Backfill == nil || r.Backfill.Chunks <= 0 || r.Backfill.LockMaxMs <= 0) {
				t.Errorf("%s: no chunks or row-lock time read from walcast's log: %+v", p.Name, r.Backfill)
			}
		}
	}
	if len(res.Latency) != 2 || res.Latency[0].Events == 0 || res.Latency[1].Events == 0 || res.BigTx == nil || res.BigTx.HostRSSMiB <= 0 {
		t.Errorf("latency %+v, big transaction %+v", res.Latency, res.BigTx)
	}
	if iso := res.Isolate; iso == nil || iso.AloneSeconds <= 0 || iso.WithSlowSeconds <= 0 || iso.Outage == nil ||
		iso.Outage.DownDistinct < iso.Outage.Events || iso.Outage.MaxRetainedWAL <= 0 {
		t.Errorf("isolation %+v", iso)
	} else if len(iso.Catchup) != 1 || iso.WithStalledSeconds <= 0 || iso.Catchup[0].ChangesPerSec <= 0 ||
		iso.PeakRSS.WithStalled.Host <= 0 || iso.Catchup[0].PeakRSS.Host <= 0 {
		t.Errorf("isolation next to a stalled sink: %+v, catch-up %+v", iso, iso.Catchup)
	} else {
		t.Logf("isolation outage %+v", *iso.Outage)
	}
	out := filepath.Join(t.TempDir(), "results.json")
	if err := res.WriteJSON(out); err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	res.WriteTable(&table)
	t.Logf("\n%s", table.String())
}

// BenchmarkDrain runs the benchmark (go test -run '^$' -bench Drain
// -benchtime 1x ./bench [-bench.scale 1]) and reports each path's median
// changes/s. `make bench` runs the full-size, three-run version through
// cmd/walcast-bench instead.
func BenchmarkDrain(b *testing.B) {
	bin := buildBinaries(b)
	for b.Loop() {
		cfg := Default().Scale(*benchScale)
		cfg.BinDir = bin
		cfg.Runs = 1
		cfg.LatencyDuration = 2 * time.Second
		res, err := Run(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range res.Paths {
			b.ReportMetric(p.Median.ChangesPerSec, p.Name+"-changes/s")
		}
		var table strings.Builder
		res.WriteTable(&table)
		b.Logf("\n%s", table.String())
	}
}
