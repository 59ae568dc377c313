package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/walcast/walcast/host/internal/control/leader"
)

// The binaries under test as processes: walcast run (or any command that
// runs until stopped) in the background with its log kept for a failing
// test, walcast commands run to completion, and what a running walcast
// serves (/metrics, /healthz).

// ---- processes in the background ----------------------------------------

// startAnnounced starts cmd as startLogged does, and waits up to d for
// the first line of its stdout that re matches: how a server started on
// port 0 says where it listens. It returns the match's first group.
func startAnnounced(t testing.TB, cmd *exec.Cmd, what string, re *regexp.Regexp, d time.Duration) string {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	startLogged(t, cmd, what)
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, stdout) // a line too long for the scanner
	}()
	select {
	case s := <-found:
		return s
	case <-time.After(d):
		t.Fatalf("%s did not say where it listens within %s", what, d)
		return ""
	}
}

// process is a command running in the background (startLogged).
type process struct {
	cmd    *exec.Cmd
	log    string        // where its output goes, unless sent elsewhere
	exited chan struct{} // closed once it exited
	err    error         // Wait's result, once exited is closed
}

// startLogged starts cmd, whose output (what it does not already send
// elsewhere) goes to a log file named after what, and kills it when the
// test ends, printing the log's tail if the test failed. files (the other
// ends of its output) are closed once it exited.
func startLogged(t testing.TB, cmd *exec.Cmd, what string, files ...*os.File) *process {
	t.Helper()
	p := &process{cmd: cmd, log: filepath.Join(t.TempDir(), strings.ReplaceAll(what, " ", "-")+".log"), exited: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Stdout == nil {
		cmd.Stdout = f
	}
	if cmd.Stderr == nil {
		cmd.Stderr = f
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", what, err)
	}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		for _, o := range files {
			o.Close()
		}
		close(p.exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("%s log (%s):\n%s", what, p.log, tail(p.logText(), 60))
		}
	})
	return p
}

func (p *process) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// walcastProc is a walcast run in the background (startWalcast).
type walcastProc struct {
	t testing.TB
	*process
}

// walcastCommand is the walcast binary TestMain built, with args.
func walcastCommand(args ...string) *exec.Cmd {
	return exec.Command(filepath.Join(binDir, "walcast"), args...)
}

// runCommand is `walcast run pipeline` with plugins from pluginDir and
// args.
func runCommand(pluginDir, pipeline string, args ...string) *exec.Cmd {
	return walcastCommand(append([]string{"run", pipeline, "--plugin-dir", pluginDir, "--shutdown-timeout", "10s"}, args...)...)
}

// startWalcast runs the built binary on a pipeline file; its log goes to a
// file that is printed when the test fails.
func startWalcast(t testing.TB, pipeline string, args ...string) *walcastProc {
	t.Helper()
	return startWalcastAttr(t, nil, pipeline, args...)
}

// startWalcastAttr is startWalcast with process attributes (e.g. its own
// process group).
func startWalcastAttr(t testing.TB, attr *syscall.SysProcAttr, pipeline string, args ...string) *walcastProc {
	t.Helper()
	cmd := runCommand(binDir, pipeline, args...)
	cmd.SysProcAttr = attr
	return startWalcastCmd(t, cmd)
}

// startWalcastStdout is startWalcast with walcast's stdout going to
// stdoutPath and its log (stderr) to a file of its own.
func startWalcastStdout(t testing.TB, pipeline, stdoutPath string) *walcastProc {
	t.Helper()
	outf, err := os.OpenFile(stdoutPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := runCommand(binDir, pipeline)
	cmd.Stdout = outf
	return startWalcastCmd(t, cmd, outf)
}

// startWalcastCmd starts a walcast command (runCommand, or any other
// that runs until stopped) in the background.
func startWalcastCmd(t testing.TB, cmd *exec.Cmd, files ...*os.File) *walcastProc {
	t.Helper()
	return &walcastProc{t: t, process: startLogged(t, cmd, "walcast", files...)}
}

// kill SIGKILLs walcast: no shutdown, no final checkpoint, no final
// confirmation.
func (p *walcastProc) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
	p.err = nil // killed on purpose: a later stop sees a clean end
}

// stop sends SIGTERM and expects a clean exit.
func (p *walcastProc) stop() {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		if p.err != nil {
			p.t.Fatalf("walcast exited with %v after SIGTERM; log:\n%s", p.err, tail(p.logText(), 40))
		}
	case <-time.After(60 * time.Second):
		p.t.Fatal("walcast did not exit within 60s of SIGTERM")
	}
}

// waitExit1 waits up to within for walcast to exit with status 1, the way
// it stops on an error it cannot go on from; after says what should have
// stopped it, for the failure message.
func (p *walcastProc) waitExit1(t testing.TB, within time.Duration, after string) {
	t.Helper()
	select {
	case <-p.exited:
		var ee *exec.ExitError
		if !errors.As(p.err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("walcast exited with %v after %s, want exit status 1", p.err, after)
		}
	case <-time.After(within):
		t.Fatalf("walcast still runs %s after %s", within, after)
	}
}

// waitLog waits for a line containing substr in walcast's log.
func (p *walcastProc) waitLog(t testing.TB, substr string) {
	t.Helper()
	waitFor(t, "walcast to log "+strconv.Quote(substr), time.Minute, func() bool { return strings.Contains(p.logText(), substr) })
}

// childPIDs lists the direct children of pid (the sink plugin processes).
func childPIDs(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may contain spaces.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, n)
		}
	}
	return out
}

// streamItems starts walcast, commits n rows and waits until the receiver
// has them all, then stops walcast cleanly.
func streamItems(t *testing.T, db *pgx.Conn, pipeline, slot string, rcv *receiver, from, n int, args ...string) {
	t.Helper()
	w := startWalcast(t, pipeline, args...)
	waitSlot(t, db, slot)
	w.waitLog(t, "streaming from slot")
	before := rcv.distinct()
	insertItems(t, db, from, n)
	waitFor(t, "deliveries", time.Minute, func() bool { return rcv.distinct() >= before+n })
	w.stop()
	// What a test does to the slot next must not race its walsender.
	waitSlotReleased(t, db, slot)
}

// startConsole runs `walcast console` on a free loopback port, with env
// added to its environment, and returns its URL.
func startConsole(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := walcastCommand(append([]string{"console", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	return startAnnounced(t, cmd, "walcast console", regexp.MustCompile(`^walcast console on (http://\S+/)`), time.Minute)
}

// ---- commands run to completion -----------------------------------------

// walcastTimed runs walcast with args to completion, outside any
// $WALCAST_PLUGIN_DIR (so that only --plugin-dir and binDir are searched)
// and with env added, and returns its stdout, stderr and exit status. It
// kills walcast after d: exit code -1 then (a walcast run that streamed
// instead of refusing to start).
func walcastTimed(t *testing.T, d time.Duration, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "walcast"), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WALCAST_PLUGIN_DIR=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		return stdout.String(), stderr.String(), exitErr.ExitCode()
	case err != nil:
		t.Fatalf("walcast %s: %v", strings.Join(args, " "), err)
	}
	return stdout.String(), stderr.String(), 0
}

// walcastEnvCmd is walcastTimed with a deadline that leaves room for
// `plugin install` builds on a loaded machine.
func walcastEnvCmd(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	return walcastTimed(t, 10*time.Minute, env, args...)
}

// walcastCmd is walcastEnvCmd in the test's own environment.
func walcastCmd(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return walcastEnvCmd(t, nil, args...)
}

// walcastOut is walcastCmd with stdout and stderr together.
func walcastOut(t *testing.T, args ...string) (string, int) {
	t.Helper()
	stdout, stderr, code := walcastCmd(t, args...)
	return stdout + stderr, code
}

// walcastCLI is walcastOut for a command that should succeed within two
// minutes: an exit status other than 0 is its error.
func walcastCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	stdout, stderr, code := walcastTimed(t, 2*time.Minute, nil, args...)
	if code != 0 {
		return stdout + stderr, fmt.Errorf("walcast %s: exit status %d", args[0], code)
	}
	return stdout + stderr, nil
}

// runOnce runs `walcast run` expecting it to fail at startup, and returns
// its output.
func runOnce(t *testing.T, pipeline string, env ...string) string {
	t.Helper()
	stdout, stderr, code := walcastTimed(t, time.Minute, env, "run", pipeline)
	if code != 1 {
		t.Fatalf("walcast run: want exit status 1, got %d (-1: still running after a minute); output:\n%s%s", code, stdout, stderr)
	}
	return stdout + stderr
}

// ---- what a running walcast serves ----------------------------------------

// metricsBase returns the http://host:port walcast serves /metrics and
// /healthz on (started with --metrics-listen 127.0.0.1:0).
func metricsBase(t *testing.T, p *walcastProc) string {
	t.Helper()
	p.waitLog(t, "serving metrics")
	m := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(p.logText())
	if m == nil {
		t.Fatalf("no metrics address in the log:\n%s", p.logText())
	}
	return "http://" + m[1]
}

// healthz returns /healthz's status code and body.
func healthz(t *testing.T, base string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return mf
}

// find returns the series of family name whose labels include labels.
func find(t *testing.T, mf map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	f, ok := mf[name]
	if !ok {
		t.Fatalf("metric %s missing", name)
	}
	for _, m := range f.GetMetric() {
		match := 0
		for _, lp := range m.GetLabel() {
			if v, ok := labels[lp.GetName()]; ok && v == lp.GetValue() {
				match++
			}
		}
		if match == len(labels) {
			return m
		}
	}
	return nil
}

func value(t *testing.T, mf map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	m := find(t, mf, name, labels)
	switch {
	case m == nil:
		t.Fatalf("no %s series with %v", name, labels)
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	t.Fatalf("%s is neither a counter nor a gauge", name)
	return 0
}

func histogramCount(t *testing.T, mf map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	if _, ok := mf[name]; !ok {
		return 0 // no observation yet
	}
	m := find(t, mf, name, labels)
	if m == nil {
		return 0
	}
	return float64(m.GetHistogram().GetSampleCount())
}

// startCapturing starts walcast on pipeline, a file writePipeline wrote,
// and waits until its slot exists: from then on every commit is captured
// (changes committed before are not, by design).
func startCapturing(t testing.TB, db *pgx.Conn, pipeline string, args ...string) *walcastProc {
	t.Helper()
	p := startWalcast(t, pipeline, args...)
	waitSlot(t, db, "walcast_"+strings.TrimSuffix(filepath.Base(pipeline), ".hcl"))
	return p
}

// holderName is how walcast process p names itself as a pipeline's leader
// (walcast.leaderships, walcast status) and in its sessions'
// application_name.
func holderName(p *walcastProc) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("walcast %s pid %d", host, p.cmd.Process.Pid)
}

// leadersOf maps each of pipelines that is led to its leader's name. err
// is the first failure to read one; the others are read all the same.
func leadersOf(db *pgx.Conn, pipelines []string) (map[string]string, error) {
	out := map[string]string{}
	var first error
	for _, n := range pipelines {
		h, ok, err := leader.Current(context.Background(), db, n)
		if err != nil && first == nil {
			first = err
		}
		if err == nil && ok {
			out[n] = h.Name
		}
	}
	return out, first
}

// leaderAndStandby starts two walcast processes of pipeline: the first
// leads (streams), the second stands by.
func leaderAndStandby(t testing.TB, pipeline string) (lead, standby *walcastProc) {
	t.Helper()
	lead = startWalcast(t, pipeline)
	lead.waitLog(t, "streaming from slot")
	standby = startWalcast(t, pipeline)
	standby.waitLog(t, "standing by")
	return lead, standby
}
