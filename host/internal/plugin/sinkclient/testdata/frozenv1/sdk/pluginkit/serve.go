package pluginkit

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/walcast/walcast/proto/sink/wire"
)

// MaxMessageSize is the largest Deliver request a sink receives (2 GiB, the
// most a protobuf message can be): the host cuts batches to 16 MiB by
// default, and a single larger event, up to PostgreSQL's 1 GB per value,
// comes alone.
const MaxMessageSize = wire.MaxMessageSize

// closeTimeout bounds the Close a plugin runs on its own when the host went
// away without calling it.
const closeTimeout = 5 * time.Second

// parentPollInterval is how often Serve checks that the host still runs.
const parentPollInterval = time.Second

// Serve runs s as a walcast sink plugin and returns when the host shuts it
// down or goes away. It is meant to be the whole of a plugin's main:
//
//	func main() { pluginkit.Serve(mysink.New()) }
//
// Once Serve runs, os.Stdout and os.Stderr are go-plugin's stdio streams to
// the host: a sink that writes to os.Stdout must look the variable up after
// Serve started (in Open, say), not capture it earlier, and must never print
// to stdout before Serve: that corrupts the handshake. Log with NewLogger.
//
// go-plugin does not stop a plugin whose host died, so Serve watches its
// parent process and, when it is gone, stops serving. In every case Serve
// calls Close on a sink that was opened and not closed, bounded by a short
// timeout, before it returns.
func Serve(s Sink) {
	srv := &server{sink: s}
	if path := os.Getenv(wire.EnvCPUProfile); path != "" {
		defer startCPUProfile(path)()
	}
	// The host stops its plugins itself, after their batches in flight
	// have finished and the final checkpoints are written. A SIGTERM or
	// SIGINT sent to the whole process group or cgroup (systemd's
	// KillMode=control-group, timeout, kill -- -PGID, Ctrl-C) must not end
	// the plugin first: that breaks the batches in flight and makes them
	// be delivered again. A dead host is noticed by the parent watch
	// below (and Pdeathsig on Linux).
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT)

	var (
		mu     sync.Mutex
		stopFn func()
	)
	done := make(chan struct{})
	defer close(done)
	// Read the parent now, not in the goroutine, which may first run after
	// the parent is already gone.
	go watchParent(done, os.Getppid(), func() bool {
		mu.Lock()
		defer mu.Unlock()
		if stopFn == nil {
			return false
		}
		stopFn()
		return true
	})

	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: wire.Handshake(),
		Plugins:         plugin.PluginSet{wire.PluginName: &grpcPlugin{srv: srv}},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			opts = append(opts, wire.ServerOptions()...)
			g := grpc.NewServer(opts...)
			mu.Lock()
			stopFn = g.Stop
			mu.Unlock()
			return g
		},
		// go-plugin's own messages, in the same JSON form as NewLogger's.
		Logger: hclog.New(&hclog.LoggerOptions{
			Output:     os.Stderr,
			Level:      hclog.LevelFromString(os.Getenv(wire.EnvLogLevel)),
			JSONFormat: true,
		}),
	})

	srv.closeIfOpen(closeTimeout)
}

// startCPUProfile profiles the plugin into path until the returned
// function is called; a profile that cannot be written is skipped (it is
// a measuring aid, never a reason to fail).
func startCPUProfile(path string) func() {
	f, err := os.Create(path)
	if err != nil {
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// watchParent calls stop once the parent process ppid is gone (the plugin
// was re-parented) and retries until stop reports it took effect or done
// is closed.
func watchParent(done <-chan struct{}, ppid int, stop func() bool) {
	t := time.NewTicker(parentPollInterval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if os.Getppid() != ppid && stop() {
				return
			}
		}
	}
}

// grpcPlugin registers the sink service with go-plugin's gRPC server. It
// serves only; the host has its own client side (its plugin client).
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	srv *server
}

var _ plugin.GRPCPlugin = (*grpcPlugin)(nil)

func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	s.RegisterService(serviceDesc(), p.srv)
	return nil
}

func (p *grpcPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("pluginkit serves sinks only; the host has its own client")
}
