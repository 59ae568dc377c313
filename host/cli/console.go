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
	"github.com/walcast/walcast/host/internal/control/pauses"
	"github.com/walcast/walcast/host/internal/control/reports"
)

// EnvConsoleToken is read when --token is not given.
const EnvConsoleToken = "WALCAST_CONSOLE_TOKEN"

// consoleReplayWait is how long a replay button waits for a running
// daemon to deliver the events before the page comes back; the daemon
// goes on trying after that.
const consoleReplayWait = 10 * time.Second

// cmdConsole serves the web console for the pipelines until SIGINT/SIGTERM.
func cmdConsole(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("console", stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve the console on")
	token := fs.String("token", "", "access token required on every request (default $"+EnvConsoleToken+"); needed to listen beyond loopback")
	pluginDir := fs.String("plugin-dir", "", "directory holding walcast-sink-* plugins (replay when no daemon runs)")
	sampleEvery := fs.Duration("sample-every", 5*time.Second, "how often to sample each slot's lag")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	paths, code, ok := parseAll(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(paths) == 0 {
		fmt.Fprint(stderr, "walcast console: want one or more PIPELINE.hcl arguments\n\n")
		printHelp(stderr, fs)
		return 2
	}
	log, err := newLogger(stderr, *logLevel, "text")
	if err != nil {
		fmt.Fprintln(stderr, "walcast console:", err)
		return 2
	}
	if *sampleEvery < time.Second {
		fmt.Fprintln(stderr, "walcast console: --sample-every must be at least 1s")
		return 2
	}
	if *token == "" {
		*token = os.Getenv(EnvConsoleToken)
	}
	public, err := console.NeedsToken(*listen)
	if err != nil {
		fmt.Fprintln(stderr, "walcast console:", err)
		return 2
	}
	if public && *token == "" {
		fmt.Fprintf(stderr, "walcast console: listening on %s reaches beyond this machine: set a token with --token or $%s\n", *listen, EnvConsoleToken)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	actions := consoleActions{pipelines: map[string]replayTarget{}, pluginDir: *pluginDir, log: log}
	var pipelines []*console.Pipeline
	for _, path := range paths {
		octx, cancel := context.WithTimeout(ctx, time.Minute)
		p, store, pool, ok := openStore(octx, path, stderr)
		cancel()
		if !ok {
			return 1
		}
		defer pool.Close()
		if _, dup := actions.pipelines[p.Name]; dup {
			fmt.Fprintf(stderr, "walcast console: pipeline %q is named by two files\n", p.Name)
			return 2
		}
		parkedStore, pauseStore := parking.New(pool, p.Name), pauses.New(pool, p.Name)
		actions.pipelines[p.Name] = replayTarget{p: p, parked: parkedStore, pauses: pauseStore, db: pool}
		cp := &console.Pipeline{Name: p.Name, Slot: p.Source.Slot, Checkpoints: store, Parked: parkedStore, Pauses: pauseStore, Reports: reports.New(pool, p.Name), DB: pool}
		for _, s := range p.Sinks {
			cp.Sinks = append(cp.Sinks, console.Sink{ID: s.ID, Type: s.Type, Durable: s.Durable})
		}
		pipelines = append(pipelines, cp)
	}
	srv, err := console.New(console.Config{Pipelines: pipelines, Actions: actions, Token: *token, SampleEvery: *sampleEvery, Logger: log})
	if err != nil {
		fmt.Fprintln(stderr, "walcast console:", err)
		return 1
	}
	l, err := net.Listen("tcp", *listen)
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
	if *token != "" {
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
	pipelines map[string]replayTarget
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
	return applyPause(ctx, t.p, t.pauses, sink, paused)
}
