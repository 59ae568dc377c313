package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/pluginkit"
)

const drainTimeout = 30 * time.Minute

// drain empties slot with path p and measures it.
func (e *env) drain(ctx context.Context, p, slot string, run int) (Drain, error) {
	poll, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		return Drain{}, err
	}
	defer poll.Close(context.Background())
	switch p {
	case PathRecvlogical:
		return e.drainRecvlogical(ctx, poll, slot)
	case PathLibrary, PathLibraryRules:
		return e.drainLibrary(ctx, poll, slot, p == PathLibraryRules)
	case PathBackfill, PathBackfillQuiet, PathBackfillKafka:
		return e.drainBackfill(ctx, poll, p, run)
	case PathNATS, PathRedis:
		return e.drainDestination(ctx, poll, p, slot, run)
	case PathConduit:
		return e.drainConduit(ctx, poll, slot, run)
	}
	d := daemonRun{name: fmt.Sprintf("%s_%d", strings.ReplaceAll(p, "-", "_"), run), slot: slot}
	switch p {
	case PathStdout, PathStdoutDebezium, PathStdoutSequin, PathStdoutCE,
		PathStdoutFilter, PathStdoutTransform:
		d.sink = `sink "stdout" "out" {
` + formatLine(p) + rulesBlock(p) + `  config {
    path = "/dev/null"
  }
}`
	case PathWebhook100, PathWebhook1000, PathWebhookRoute, PathWebhookRules:
		rcv, err := startReceiver(false)
		if err != nil {
			return Drain{}, err
		}
		defer rcv.close()
		d.rcv = rcv
		d.sink = webhookSink(p, rcv.url)
	case PathKafka, PathKafkaDebezium:
		addr, stop, err := e.startKfake(ctx)
		if err != nil {
			return Drain{}, err
		}
		defer stop()
		d.sink = fmt.Sprintf(`sink "kafka" "kafka" {
%s  config {
    brokers          = [%q]
    eos              = true
    transactional_id = "bench-%s"
  }
}`, formatLine(p), addr, d.name)
	case PathS3JSONL, PathS3Parquet:
		url, stop, err := startFakeS3()
		if err != nil {
			return Drain{}, err
		}
		defer stop()
		format := "jsonl"
		if p == PathS3Parquet {
			format = "parquet"
		}
		d.sink = s3Sink(url, format)
	case PathPostgresMirror:
		finish, cleanup, err := e.postgresMirror(ctx, &d, run)
		if err != nil {
			return Drain{}, err
		}
		defer cleanup()
		r, err := e.runDaemon(ctx, poll, d)
		if err != nil {
			return r, err
		}
		r.ServerCPU, err = finish(ctx)
		r.ServerCPUPerChange = r.ServerCPU / float64(e.changes) * 1e6
		return r, err
	}
	return e.runDaemon(ctx, poll, d)
}

// webhookSink is the sink block of a webhook path: batches of 100 or
// 1000 to the bench's receiver, with the rules of a rules path.
func webhookSink(p, url string) string {
	batch := 100
	if p != PathWebhook100 {
		batch = 1000
	}
	return fmt.Sprintf(`sink "webhook" "hook" {
`+rulesBlock(p)+`  delivery {
    batch_size = %d
  }
  config {
    url = %q
  }
}`, batch, url)
}

// formatLine is the sink's format attribute for the paths that choose one.
func formatLine(p string) string {
	switch p {
	case PathStdoutDebezium, PathKafkaDebezium:
		return "  format = \"debezium\"\n"
	case PathStdoutSequin:
		return "  format = \"sequin\"\n"
	case PathStdoutCE:
		return "  format = \"cloudevents\"\n"
	}
	return ""
}

func (e *env) drainRecvlogical(ctx context.Context, poll *pgx.Conn, slot string) (Drain, error) {
	end := pluginkit.FormatLSN(e.endLSN)
	cmd := e.cluster.Command(ctx, "pg_recvlogical", "-d", e.dsn, "--slot", slot, "--start", "--no-loop",
		"-o", "proto_version=1", "-o", "publication_names="+publication, "-f", "/dev/null", "-E", end)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	c, sender, err := e.runDrain(ctx, cmd, poll, slot, "pg_recvlogical", &stderr, endAtExit)
	if err != nil {
		return Drain{}, err
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	r := Drain{
		HostRSSMiB: float64(ru.Maxrss) / 1024,
		HostCPU:    tv(ru.Utime) + tv(ru.Stime),
		SenderCPU:  sender,
	}
	c.fill(&r)
	return e.rates(r), nil
}

// runDrain starts a child that drains slot and exits at the end of the
// workload, and returns its clock (the drain ends as end says) and the
// walsender's CPU seconds from when it became active until the end. A
// child that fails, or does not finish within drainTimeout, is an error
// carrying its stderr.
func (e *env) runDrain(ctx context.Context, cmd *exec.Cmd, poll *pgx.Conn, slot, what string, stderr *bytes.Buffer, end endCondition) (c clock, senderCPU float64, err error) {
	c.start = time.Now()
	if err := cmd.Start(); err != nil {
		return c, 0, fmt.Errorf("start %s: %w", what, err)
	}
	ex := newExit()
	var waitErr error
	go func() { waitErr = cmd.Wait(); ex.close() }()
	var pid int
	c.active, pid, err = e.waitSender(ctx, poll, slot, ex.done)
	if err != nil {
		cmd.Process.Kill()
		<-ex.done
		return c, 0, fmt.Errorf("%s: %w: %s", what, err, stderr.String())
	}
	sender := watchSender(pid)
	c.end, err = e.waitEnd(ctx, poll, slot, ex, end, drainTimeout)
	if err != nil {
		cmd.Process.Kill()
		<-ex.done
		sender.stop()
		return c, 0, fmt.Errorf("%s: %w: %s", what, err, stderr.String())
	}
	<-ex.done
	// The walsender leaves with its client: give it a moment, so that the
	// watch's last sample is as late as possible.
	for range 25 {
		if _, err := readProcCPU(pid); err != nil {
			break
		}
		time.Sleep(senderSample)
	}
	senderCPU = sender.stop()
	if waitErr != nil {
		return c, senderCPU, fmt.Errorf("%s: %w: %s", what, waitErr, stderr.String())
	}
	return c, senderCPU, nil
}

// rates fills in what follows from the measured seconds and CPU times.
func (e *env) rates(r Drain) Drain {
	r.ChangesPerSec = float64(e.changes) / r.Seconds
	r.SenderShare = r.SenderCPU / r.Seconds
	r.CPUPerChange = (r.HostCPU + r.PluginCPU) / float64(e.changes) * 1e6
	return r
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// libraryReport is what the library-mode consumer prints when done.
type libraryReport struct {
	Events    int64   `json:"events"`
	LastUnixN int64   `json:"last_unix_nano"`
	CPU       float64 `json:"cpu_seconds"`
	MaxRSSKiB int64   `json:"max_rss_kib"`
}

func (e *env) drainLibrary(ctx context.Context, poll *pgx.Conn, slot string, withRules bool) (Drain, error) {
	args := []string{"library", "-dsn", e.dsn, "-slot", slot, "-publication", publication, "-table", "public.bench",
		"-n", fmt.Sprint(e.changes)}
	if withRules {
		args = append(args, "-rules")
	}
	if e.cfg.ProfileDir != "" {
		args = append(args, "-profile", filepath.Join(e.cfg.ProfileDir, "library-"+slot))
	}
	cmd := exec.CommandContext(ctx, filepath.Join(e.cfg.BinDir, "walcast-bench"), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	c, sender, err := e.runDrain(ctx, cmd, poll, slot, "library consumer", &stderr, endAtConfirmed)
	if err != nil {
		return Drain{}, err
	}
	var rep libraryReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		return Drain{}, fmt.Errorf("library consumer report %q: %w", stdout.String(), err)
	}
	r := Drain{
		HostRSSMiB: float64(rep.MaxRSSKiB) / 1024,
		HostCPU:    rep.CPU,
		SenderCPU:  sender,
		Events:     rep.Events,
	}
	c.fill(&r)
	return e.rates(r), nil
}

// daemonRun is one walcast daemon drain.
type daemonRun struct {
	name string // pipeline name
	slot string
	sink string // the sink block
	rcv  *receiver
	// metrics, when set, is the address the daemon serves /metrics on.
	metrics string
}

// startDaemon writes the pipeline and starts the daemon.
func (e *env) startDaemon(ctx context.Context, d daemonRun) (*process, error) {
	pipeline := fmt.Sprintf(`pipeline = %q

source "postgres" {
  dsn         = %q
  tables      = ["public.bench"]
  slot        = %q
  publication = %q
}

%s
`, d.name, e.dsn, d.slot, publication, d.sink)
	path := filepath.Join(e.work, d.name+".hcl")
	if err := os.WriteFile(path, []byte(pipeline), 0o644); err != nil {
		return nil, err
	}
	if e.cfg.ProfileDir != "" {
		args := []string{"daemon", "-profile", filepath.Join(e.cfg.ProfileDir, d.name), "-plugin-dir", e.cfg.BinDir}
		if d.metrics != "" {
			args = append(args, "-metrics-listen", d.metrics)
		}
		return e.spawn(ctx, d.name, filepath.Join(e.cfg.BinDir, "walcast-bench"), append(args, path)...)
	}
	args := []string{"run", "-log-level", "warn"}
	if d.metrics != "" {
		args = append(args, "--metrics-listen", d.metrics)
	}
	return e.spawn(ctx, d.name, filepath.Join(e.cfg.BinDir, "walcast"), append(args, path)...)
}

func (e *env) runDaemon(ctx context.Context, poll *pgx.Conn, d daemonRun) (Drain, error) {
	d.metrics = freeAddr()
	var c clock
	c.start = time.Now()
	p, err := e.startDaemon(ctx, d)
	if err != nil {
		return Drain{}, err
	}
	defer p.kill()
	var pid int
	c.active, pid, err = e.waitSender(ctx, poll, d.slot, p.exited)
	if err != nil {
		return Drain{}, fmt.Errorf("walcast: %w\n%s", err, e.tailLog(d.name))
	}
	sender := watchSender(pid)
	defer sender.stop()
	if c.end, err = e.waitEnd(ctx, poll, d.slot, p.exit(), endAtConfirmed, drainTimeout); err != nil {
		return Drain{}, fmt.Errorf("walcast: %w\n%s", err, e.tailLog(d.name))
	}
	host, _ := readProc(p.pid())
	plugin := childrenUsage(p.pid())
	r := Drain{
		HostRSSMiB:   float64(host.HWMKiB) / 1024,
		PluginRSSMiB: float64(plugin.HWMKiB) / 1024,
		HostCPU:      host.CPU,
		PluginCPU:    plugin.CPU,
		SenderCPU:    sender.stop(),
	}
	c.fill(&r)
	if n := deliverCalls(d.metrics); n > 0 {
		r.EventsPerDeliver = float64(e.changes) / n
	}
	if d.rcv != nil {
		// Confirmed means the sink had every event: the receiver counted
		// them before.
		if r.Events = d.rcv.events.Load(); r.Events < int64(e.changes) {
			return r, fmt.Errorf("the slot was confirmed at the end but the receiver counted %d of %d events", r.Events, e.changes)
		}
	}
	return e.rates(r), e.stopDaemon(p)
}

// startKfake runs walcast-kfake on a free port.
func (e *env) startKfake(ctx context.Context) (string, func(), error) {
	cmd := exec.CommandContext(ctx, filepath.Join(e.cfg.BinDir, "walcast-kfake"), "-ports", "0", "-log-level", "warn")
	cmd.Stderr = io.Discard
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { cmd.Process.Kill(); cmd.Wait() }
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				addr <- a
			}
		}
		io.Copy(io.Discard, out)
	}()
	select {
	case a := <-addr:
		return a, stop, nil
	case <-time.After(30 * time.Second):
		stop()
		return "", nil, errors.New("walcast-kfake did not report its address within 30s")
	}
}

// freeAddr is a loopback address with a port nobody listens on now ("" if
// none could be found: the daemon then serves no metrics).
func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return ""
	}
	defer ln.Close()
	return ln.Addr().String()
}

// deliverCalls reads how many Deliver calls the daemon serving metrics on
// addr made (walcast_sink_delivery_attempts_total); 0 when unknown.
func deliverCalls(addr string) float64 {
	if addr == "" {
		return 0
	}
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var n float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "walcast_sink_delivery_attempts_total{"); ok {
			if _, v, ok := strings.Cut(rest, "} "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				n += f
			}
		}
	}
	return n
}
