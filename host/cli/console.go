package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/walcast/walcast/host/internal/console"
	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/report"
)

// EnvConsoleToken is read when --token is not given.
const EnvConsoleToken = "WALCAST_CONSOLE_TOKEN"

// consoleReplayWait is how long a replay button waits for a running
// daemon to deliver the events before the page comes back; the daemon
// goes on trying after that.
const consoleReplayWait = 10 * time.Second

// cmdConsole serves the web console for the pipelines until SIGINT/SIGTERM.
func cmdConsole(args []string, stdout, stderr io.Writer) int {
	o, code, ok := parseConsole(args, stdout, stderr)
	if !ok {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	targets, code := openConsoleTargets(ctx, o.paths, stderr)
	if code != 0 {
		return code
	}
	defer func() {
		for _, t := range targets {
			t.close()
		}
	}()
	actions := consoleActions{pipelines: map[string]target{}, pluginDir: o.pluginDir, log: o.log}
	var pipelines []*report.Pipeline
	for _, t := range targets {
		actions.pipelines[t.p.Name] = t
		rp := t.report()
		pipelines = append(pipelines, &rp)
	}
	srv, err := console.New(console.Config{Pipelines: pipelines, Actions: actions, Token: o.token, SampleEvery: o.sampleEvery, Logger: o.log})
	if err != nil {
		fmt.Fprintln(stderr, "walcast console:", err)
		return 1
	}
	return serveConsole(ctx, srv, o, stdout, stderr)
}

// consoleOptions are walcast console's arguments.
type consoleOptions struct {
	paths       []string
	listen      string
	token       string // the flag's, else $WALCAST_CONSOLE_TOKEN's
	pluginDir   string
	sampleEvery time.Duration
	log         *slog.Logger
}

// parseConsole parses and checks walcast console's arguments; when ok is
// false the command exits with code, the problem printed.
func parseConsole(args []string, stdout, stderr io.Writer) (o consoleOptions, code int, ok bool) {
	fs := newFlags("console", stderr)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address to serve the console on")
	fs.StringVar(&o.token, "token", "", "access token required on every request (default $"+EnvConsoleToken+"); needed to listen beyond loopback")
	fs.StringVar(&o.pluginDir, "plugin-dir", "", "directory holding walcast-sink-* plugins (replay when no daemon runs)")
	fs.DurationVar(&o.sampleEvery, "sample-every", 5*time.Second, "how often to sample each slot's lag")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if o.paths, code, ok = parseAll(fs, args, stdout, stderr); !ok {
		return o, code, false
	}
	if len(o.paths) == 0 {
		fmt.Fprint(stderr, "walcast console: want one or more PIPELINE.hcl arguments\n\n")
		printHelp(stderr, fs)
		return o, 2, false
	}
	var err error
	if o.log, err = newLogger(stderr, *logLevel, "text"); err != nil {
		fmt.Fprintln(stderr, "walcast console:", err)
		return o, 2, false
	}
	if o.sampleEvery < time.Second {
		fmt.Fprintln(stderr, "walcast console: --sample-every must be at least 1s")
		return o, 2, false
	}
	if o.token == "" {
		o.token = os.Getenv(EnvConsoleToken)
	}
	public, err := console.NeedsToken(o.listen)
	if err != nil {
		fmt.Fprintln(stderr, "walcast console:", err)
		return o, 2, false
	}
	if public && o.token == "" {
		fmt.Fprintf(stderr, "walcast console: listening on %s reaches beyond this machine: set a token with --token or $%s\n", o.listen, EnvConsoleToken)
		return o, 2, false
	}
	return o, 0, true
}

// openConsoleTargets opens every pipeline the console shows, each within
// a minute. On a problem it closes those it opened and returns the exit
// code (0: none).
func openConsoleTargets(ctx context.Context, paths []string, stderr io.Writer) ([]target, int) {
	var ts []target
	fail := func(code int) ([]target, int) {
		for _, t := range ts {
			t.close()
		}
		return nil, code
	}
	names := map[string]bool{}
	for _, path := range paths {
		octx, cancel := context.WithTimeout(ctx, time.Minute)
		t, ok := openTarget(octx, path, stderr)
		cancel()
		if !ok {
			return fail(1)
		}
		ts = append(ts, t)
		if names[t.p.Name] {
			fmt.Fprintf(stderr, "walcast console: pipeline %q is named by two files\n", t.p.Name)
			return fail(2)
		}
		names[t.p.Name] = true
	}
	return ts, 0
}

// serveConsole listens, says where, and serves srv (sampling lag
// meanwhile) until ctx ends; then it shuts the server down, letting
// requests in progress finish for up to 5 s.
func serveConsole(ctx context.Context, srv *console.Server, o consoleOptions, stdout, stderr io.Writer) int {
	l, err := net.Listen("tcp", o.listen)
	if err != nil {
		fmt.Fprintln(stderr, "walcast console:", err)
		return 1
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	go srv.Run(ctx)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(sctx)
	}()
	url := "http://" + l.Addr().String() + "/"
	if o.token != "" {
		fmt.Fprintf(stdout, "walcast console on %s (open %s?token=<your token> once)\n", url, url)
	} else {
		fmt.Fprintf(stdout, "walcast console on %s\n", url)
	}
	if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(stderr, "walcast console:", err)
		return 1
	}
	return 0
}

// consoleActions carries out the console's buttons with the functions
// behind `walcast replay`, `pause` and `resume`.
type consoleActions struct {
	pipelines map[string]target
	pluginDir string
	log       *slog.Logger
}

var _ console.Actions = consoleActions{}

func (a consoleActions) Replay(ctx context.Context, pipeline string, req parking.ReplayRequest) (string, error) {
	t, ok := a.pipelines[pipeline]
	if !ok {
		return "", fmt.Errorf("no pipeline %q", pipeline)
	}
	var out bytes.Buffer
	err := replayParked(ctx, t, req, consoleReplayWait, a.pluginDir, a.log, &out, &out)
	if errors.Is(err, errStillParked) {
		err = errors.New("some rows are still parked")
	}
	return out.String(), err
}

func (a consoleActions) SetPaused(ctx context.Context, pipeline, sink string, paused bool) (string, error) {
	t, ok := a.pipelines[pipeline]
	if !ok {
		return "", fmt.Errorf("no pipeline %q", pipeline)
	}
	return applyPause(ctx, t, sink, paused)
}
