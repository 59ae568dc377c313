package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/host/internal/plugin/sinkclient"
	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/pluginkit/sinktest"
)

// pluginTestTimeout bounds a whole `walcast plugin test` run by default.
const pluginTestTimeout = 10 * time.Minute

// pluginTestIdentity is the pipeline and sink id a plugin under test is
// configured as (pluginkit.Setup.Sink).
var pluginTestIdentity = pluginkit.Identity{Pipeline: "plugin-test", SinkID: "plugin-test"}

// outOfProcessSkips are the checks that cannot see into another process.
var outOfProcessSkips = []string{"GoroutineLeaks"}

// cmdPluginTest runs pluginkit/sinktest's conformance checks against a
// plugin binary, launched the way walcast run launches it: exit 0 when
// every check passed or was skipped, 1 when one failed or the binary is no
// plugin, 2 for bad usage.
func cmdPluginTest(args []string, stdout, stderr io.Writer) int {
	fset := newFlags("plugin test", stderr)
	config := fset.String("config", "{}", "the sink's config block as a JSON object, as walcast passes it to Configure")
	timeout := fset.Duration("timeout", pluginTestTimeout, "give up after this long")
	logLevel := fset.String("log-level", "warn", "the plugin's log lines kept on stderr: debug, info, warn or error")
	pos, code, ok := parsePositionals(fset, args, stdout, stderr, "PATH")
	if !ok {
		return code
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "walcast plugin test: "+format+"\n", a...)
		return 1
	}
	path := pos[0]
	if err := checkExecutable(path); err != nil {
		return fail("%v", err)
	}
	raw := json.RawMessage(*config)
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return fail("--config %q is not a JSON object; pass the sink's config block as JSON, for example --config '{\"dir\":\"/tmp/out\"}'", *config)
	}
	log, err := newLogger(stderr, *logLevel, "text")
	if err != nil {
		return fail("%v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	launch := sinkclient.Config{
		Path: path, Pipeline: pluginTestIdentity.Pipeline, SinkID: pluginTestIdentity.SinkID,
		Logger: log, Stdout: io.Discard,
	}
	info, err := sinkclient.Describe(ctx, launch, nil)
	if err != nil {
		return fail("%s is not a walcast sink plugin: %v\n"+
			"A plugin completes go-plugin's handshake and serves walcast.sink.v1 or v2 (docs/writing-a-sink.md); "+
			"a Go sink's main calls pluginkit.ServeBatch", path, err)
	}
	fmt.Fprintf(stdout, "testing sink %q %s (%s)\n", info.Name, info.Version, path)
	fmt.Fprintln(stdout, "out of process the suite checks what the plugin answers; what arrives at the destination,\n"+
		"hanging and failing destinations and leaked goroutines are checked by sinktest in the sink's own tests")

	sinks := &remoteSinks{ctx: ctx, launch: launch, log: log}
	defer sinks.killAll()
	passed, failed, skipped := runSuite(ctx, stdout, sinks, raw)
	verdict := "ok  "
	if failed > 0 {
		verdict = "FAIL"
	}
	fmt.Fprintf(stdout, "%s %s: %d passed, %d failed, %d skipped\n", verdict, info.Name, passed, failed, skipped)
	if ctx.Err() != nil {
		return fail("stopped before the suite finished: %v", context.Cause(ctx))
	}
	if failed > 0 {
		return 1
	}
	return 0
}

// runSuite runs the conformance suite against the plugin's processes and
// prints each check's outcome as go test -v does, returning the counts.
func runSuite(ctx context.Context, stdout io.Writer, sinks *remoteSinks, raw json.RawMessage) (passed, failed, skipped int) {
	sinktest.Check(ctx, sinktest.Config{
		NewBatch: sinks.New,
		Identity: pluginTestIdentity,
		Config:   raw,
		Skip:     outOfProcessSkips,
	}, func(r sinktest.Result) {
		if !strings.Contains(r.Name, "/") {
			// Every sink of a top-level check has been closed by now.
			sinks.killAll()
		}
		if r.Parent && len(r.Output) == 0 {
			return // its subchecks were reported
		}
		switch r.Outcome {
		case sinktest.Pass:
			passed++
		case sinktest.Fail:
			failed++
		case sinktest.Skip:
			skipped++
		}
		fmt.Fprintf(stdout, "--- %s: %s (%.2fs)\n", r.Outcome, r.Name, r.Elapsed.Seconds())
		for _, line := range r.Output {
			fmt.Fprintf(stdout, "    %s\n", strings.ReplaceAll(line, "\n", "\n    "))
		}
	})
	return passed, failed, skipped
}

// checkExecutable says what is wrong with path as a plugin to launch.
func checkExecutable(path string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s does not exist; build the plugin first (for a Go sink: go build -o walcast-sink-NAME .)", path)
	case err != nil:
		return err
	case fi.IsDir():
		return fmt.Errorf("%s is a directory; pass the plugin's executable (for a Go sink: go build -o walcast-sink-NAME . in it)", path)
	case fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("%s is not executable; chmod +x it", path)
	}
	return nil
}

// remoteSinks launches one plugin process per sink the suite asks for, as
// the host launches one per sink of a pipeline.
type remoteSinks struct {
	ctx    context.Context
	launch sinkclient.Config
	log    *slog.Logger

	mu   sync.Mutex
	live []*sinkclient.Plugin
}

func (f *remoteSinks) New() pluginkit.BatchSink {
	p, err := sinkclient.Launch(f.ctx, f.launch)
	if err != nil {
		err = fmt.Errorf("launch %s: %w", f.launch.Path, err)
		f.log.Error("plugin test: cannot launch the plugin", "err", err)
		return &remoteSink{err: err, log: f.log}
	}
	f.mu.Lock()
	f.live = append(f.live, p)
	f.mu.Unlock()
	return &remoteSink{p: p, log: f.log}
}

// killAll stops every process launched so far.
func (f *remoteSinks) killAll() {
	f.mu.Lock()
	live := f.live
	f.live = nil
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Kill()
		}()
	}
	wg.Wait()
}

// infoTimeout bounds the Describe call behind Info, which has no context.
const infoTimeout = 10 * time.Second

// remoteSink is a sink served by a plugin process, through the host's own
// plugin client: every call crosses the process boundary as it does under
// walcast run, errors included, in whatever protocol version the plugin
// speaks. The suite sees it as a pluginkit.BatchSink.
type remoteSink struct {
	p   *sinkclient.Plugin
	err error // the launch failed
	log *slog.Logger
}

var _ pluginkit.BatchSink = (*remoteSink)(nil)

// Info has no way to return an error; one is logged, and the suite then
// reports the empty description.
func (s *remoteSink) Info() pluginkit.Info {
	if s.err != nil {
		return pluginkit.Info{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), infoTimeout)
	defer cancel()
	info, err := s.p.Info(ctx)
	if err != nil {
		s.log.Error("plugin test: Describe failed", "err", err)
	}
	return info
}

// Configure passes the config block; the sink's identity and tables are
// the launch's (remoteSinks.launch), as under walcast run.
func (s *remoteSink) Configure(ctx context.Context, setup pluginkit.Setup) error {
	if s.err != nil {
		return s.err
	}
	return s.p.Configure(ctx, setup.Config)
}

func (s *remoteSink) Open(ctx context.Context) (pluginkit.OpenResult, error) {
	if s.err != nil {
		return pluginkit.OpenResult{}, s.err
	}
	return s.p.Open(ctx)
}

// Deliver answers as the plugin did, in pluginkit's terms: the suite
// checks the kinds a sink gives its errors, and the events it names.
func (s *remoteSink) Deliver(ctx context.Context, b pluginkit.Batch) (pluginkit.DeliverResult, error) {
	if s.err != nil {
		return pluginkit.DeliverResult{}, s.err
	}
	res, err := s.p.Deliver(ctx, attempt.Batch{Events: b.Events, Replay: b.Replay, GapBefore: b.GapBefore, Epoch: b.Epoch})
	if err != nil {
		return pluginkit.DeliverResult{}, sdkError(err)
	}
	out := pluginkit.DeliverResult{Duplicates: res.Duplicates}
	if len(res.Failed) == 0 {
		return out, nil
	}
	be := &pluginkit.BatchError{Failed: make(map[int]error, len(res.Failed))}
	for _, f := range res.Failed {
		be.Failed[f.Index] = sdkError(f.Err)
	}
	return out, be
}

// sdkError gives an error of the host's plugin client the pluginkit kind
// of the error the sink returned.
func sdkError(err error) error {
	switch kind, pause := attempt.KindOf(err); kind {
	case attempt.KindThrottle:
		return pluginkit.Throttled(pause, err)
	case attempt.KindPermanent:
		return pluginkit.Permanent(err)
	case attempt.KindFatal:
		return pluginkit.Fatal(err)
	}
	return err
}

func (s *remoteSink) Close(ctx context.Context) error {
	if s.err != nil {
		return s.err
	}
	return s.p.Close(ctx)
}
