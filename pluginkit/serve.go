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
// It speaks protocol version 2 with a host that does, and version 1 with
// an older one, so a plugin built with this SDK runs under either.
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
	serve(&server{sink: legacySink{s}}, wire.ProtocolV1, wire.ProtocolV2)
}

// ServeBatch runs s as a walcast sink plugin, as Serve does for a Sink:
//
//	func main() { pluginkit.ServeBatch(mysink.New()) }
//
// It speaks protocol version 2 only: a host too old to read the events a
// BatchError names refuses the plugin when it starts, naming both
// versions, instead of running a sink whose answers it would misread.
func ServeBatch(s BatchSink) {
	serve(&server{sink: s}, wire.ProtocolV2)
}

// serve serves srv over the given protocol versions until the host is
// done with it.
func serve(srv *server, versions ...int) {
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

	var stop stopper
	done := make(chan struct{})
	defer close(done)
	// Read the parent now, not in the goroutine, which may first run after
	// the parent is already gone.
	go watchParent(done, os.Getppid(), stop.stop)

	sets := make(map[int]plugin.PluginSet, len(versions))
	for _, v := range versions {
		sets[v] = plugin.PluginSet{wire.PluginName: &grpcPlugin{srv: srv, version: v}}
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  wire.Handshake(),
		VersionedPlugins: sets,
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			opts = append(opts, wire.ServerOptions()...)
			g := grpc.NewServer(opts...)
			stop.set(g.Stop)
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

// stopper holds the gRPC server's Stop once go-plugin has built it, for
// the parent watch.
type stopper struct {
	mu sync.Mutex
	fn func()
}

func (s *stopper) set(fn func()) {
	s.mu.Lock()
	s.fn = fn
	s.mu.Unlock()
}

// stop stops the server and reports whether there was one to stop.
func (s *stopper) stop() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fn == nil {
		return false
	}
	s.fn()
	return true
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

// grpcPlugin registers the sink service of one protocol version with
// go-plugin's gRPC server. It serves only; the host has its own client
// side (its plugin client).
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	srv     *server
	version int
}

var _ plugin.GRPCPlugin = (*grpcPlugin)(nil)

func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	s.RegisterService(serviceDesc(p.version, p.srv))
	return nil
}

func (p *grpcPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("pluginkit serves sinks only; the host has its own client")
}
