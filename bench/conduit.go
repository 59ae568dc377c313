package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
)

// PathConduit drains the workload with Conduit (a peer, issue 33 goal 5):
// its built-in PostgreSQL source in logical-replication mode on the
// path's slot (snapshotMode never: the slot already holds the workload)
// to its built-in file destination, configured as its docs show
// (docs.conduit.io, pipeline configuration files, version 2.2). `make
// tools` installs conduit into bin/ from the Go module proxy; without it
// the path is skipped with a message, not failed.
//
// Timed like walcast: from the process start until the slot's
// confirmed_flush_lsn passes the workload's last transaction. Conduit
// acknowledges the position of the last record its destination wrote,
// which may be short of the commit's end that walcast confirms, so its
// clock stops at the start of the last transaction instead of its end
// (100 changes of 1,300,000 at most).
const PathConduit = "conduit"

// errSkipped is a path that cannot run here; the run goes on without it.
var errSkipped = errors.New("skipped")

// conduitBinary finds conduit in BinDir or on PATH.
func (e *env) conduitBinary() (string, error) {
	bin := filepath.Join(e.cfg.BinDir, "conduit")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if p, err := exec.LookPath("conduit"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: no conduit in %s or on PATH; `make tools` installs it with go install github.com/conduitio/conduit/cmd/conduit@%s when the Go module proxy serves it", errSkipped, e.cfg.BinDir, conduitVersion)
}

// conduitVersion is the release `make tools` installs (Makefile, CONDUIT_VERSION).
const conduitVersion = "v0.14.0"

func (e *env) drainConduit(ctx context.Context, poll *pgx.Conn, slot string, run int) (Drain, error) {
	bin, err := e.conduitBinary()
	if err != nil {
		return Drain{}, err
	}
	dir := filepath.Join(e.work, fmt.Sprintf("conduit_%d", run))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Drain{}, err
	}
	defer os.RemoveAll(dir)
	pipeline := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(pipeline, []byte(e.conduitPipeline(slot, filepath.Join(dir, "out.jsonl"))), 0o644); err != nil {
		return Drain{}, err
	}
	var c clock
	c.start = time.Now()
	p, err := e.spawn(ctx, fmt.Sprintf("conduit_%d", run), bin, "run", "--pipelines.path", pipeline,
		"--db.type", "inmemory", "--api.enabled=false", "--log.level", "warn", "--connectors.path", dir)
	if err != nil {
		return Drain{}, err
	}
	defer p.kill()
	var pid int
	if c.active, pid, err = e.waitSender(ctx, poll, slot, p.exited); err != nil {
		return Drain{}, fmt.Errorf("conduit: %w\n%s", err, e.tailLog(p.name))
	}
	sender := watchSender(pid)
	defer sender.stop()
	if c.end, err = e.waitConfirmed(ctx, poll, slot, e.lastTxLSN, p.exited, drainTimeout); err != nil {
		return Drain{}, fmt.Errorf("conduit: %w\n%s", err, e.tailLog(p.name))
	}
	u, _ := readProc(p.pid())
	kids := childrenUsage(p.pid())
	r := Drain{
		HostRSSMiB: float64(u.HWMKiB) / 1024, HostCPU: u.CPU,
		PluginRSSMiB: float64(kids.HWMKiB) / 1024, PluginCPU: kids.CPU,
		SenderCPU: sender.stop(),
	}
	c.fill(&r)
	return e.rates(r), nil
}

// conduitPipeline is Conduit's pipeline file for the path's slot.
func (e *env) conduitPipeline(slot, out string) string {
	return fmt.Sprintf(`version: "2.2"
pipelines:
  - id: walcast-bench
    status: running
    connectors:
      - id: pg
        type: source
        plugin: builtin:postgres
        settings:
          url: %q
          tables: "bench"
          cdcMode: "logrepl"
          snapshotMode: "never"
          logrepl.slotName: %q
          logrepl.publicationName: %q
          logrepl.autoCleanup: "false"
      - id: file
        type: destination
        plugin: builtin:file
        settings:
          path: %q
`, e.dsn, slot, publication, out)
}
