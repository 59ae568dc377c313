package sinkclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/pluginkit"
	sinkv1 "github.com/walcast/walcast/proto/sink/v1"
	sinkv2 "github.com/walcast/walcast/proto/sink/v2"
	"github.com/walcast/walcast/proto/sink/wire"
)

// Config says which plugin to launch and where its output goes.
type Config struct {
	// Path is the plugin executable, usually from Find.
	Path string
	// SinkID is the sink's id in the pipeline; every log record from the
	// plugin carries it as sink=<id>, and Configure passes it (with
	// Pipeline) to the sink (pluginkit.Setup.Sink).
	SinkID string
	// Pipeline is the pipeline's name.
	Pipeline string
	// Tables are the tables the sink can receive events of; Configure
	// passes them (pluginkit.Setup.Tables).
	Tables []string
	// Logger receives the plugin's logs and go-plugin's own. Nil discards
	// them.
	Logger *slog.Logger
	// SHA256, when set, is the hex SHA-256 the executable must have (from
	// the lock file of `walcast plugin install`); Launch refuses to start a
	// binary that does not match.
	SHA256 string
	// Stdout is walcast's stdout, where the stdout sink writes. Nil means
	// os.Stdout. An *os.File is also passed to the plugin as a descriptor
	// of its own (see stdoutFDEnv); anything else receives what the
	// plugin writes to its stdout through go-plugin's stdio stream.
	Stdout io.Writer
	// StartTimeout bounds the launch and handshake when the context has no
	// earlier deadline. Zero means one minute.
	StartTimeout time.Duration
	// Env holds "NAME=value" variables the plugin gets on top of the
	// allowlisted ones (see AllowedEnv): the sink's `env` attribute.
	Env []string

	// protocols are the protocol versions offered to the plugin; nil
	// offers every version this host speaks (tests play an older host).
	protocols []int
}

// protocols are the sink protocol versions this host speaks, oldest
// first: plugins built against any SDK since the first one run.
var protocols = []int{wire.ProtocolV1, wire.ProtocolV2}

// allowedEnv names the variables of walcast's environment a plugin
// inherits; see AllowedEnv.
var allowedEnv = []string{
	"PATH", "HOME", "TMPDIR", "TZ", "SSL_CERT_FILE", "SSL_CERT_DIR",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
	"http_proxy", "https_proxy", "no_proxy", "all_proxy",
}

// envPrefix marks walcast's own plugin variables, which plugins inherit.
const envPrefix = "WALCAST_PLUGIN_"

// stdoutFDEnv tells a plugin which descriptor is walcast's stdout
// (plugins/stdout reads it; the names must match). go-plugin's stdio
// stream copies a plugin's stdout to the host after the fact: a write
// that fails there (a full disk under `walcast run > file`, a closed pipe)
// is only logged, after the batch was acknowledged. Written through the
// descriptor itself, it fails the Deliver.
const stdoutFDEnv = envPrefix + "STDOUT_FD"

// AllowedEnv returns the part of environ (os.Environ's form) a plugin
// process inherits: PATH, HOME, TMPDIR, TZ, SSL_CERT_FILE, SSL_CERT_DIR,
// the proxy variables and walcast's own WALCAST_PLUGIN_* variables.
// Nothing else does: walcast's environment holds secrets
// (WALCAST_SOURCE_DSN with its password, say) that a third-party plugin
// must not see. A sink passes more with its `env` attribute.
func AllowedEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if slices.Contains(allowedEnv, name) || strings.HasPrefix(name, envPrefix) {
			out = append(out, kv)
		}
	}
	return out
}

// Plugin is one running sink plugin process. Its methods may be called
// concurrently; each passes its context to the plugin as the call's
// deadline and cancellation.
type Plugin struct {
	client *plugin.Client
	conn   *grpc.ClientConn
	calls  lifecycle // the negotiated version's service, but for Deliver
	// version is the negotiated protocol version, and deliverMethod its
	// Deliver.
	version       int
	deliverMethod string
	log           *slog.Logger
	cfg           Config
	exit          *exitNote // how the process ended, from go-plugin's log line
}

// lifecycle is the part of a sink service every protocol version shares,
// message for message; both versions' generated clients have it.
type lifecycle interface {
	Describe(ctx context.Context, in *sinkv1.DescribeRequest, opts ...grpc.CallOption) (*sinkv1.DescribeResponse, error)
	Configure(ctx context.Context, in *sinkv1.ConfigureRequest, opts ...grpc.CallOption) (*sinkv1.ConfigureResponse, error)
	Open(ctx context.Context, in *sinkv1.OpenRequest, opts ...grpc.CallOption) (*sinkv1.OpenResponse, error)
	Close(ctx context.Context, in *sinkv1.CloseRequest, opts ...grpc.CallOption) (*sinkv1.CloseResponse, error)
}

// Launch starts the plugin at cfg.Path and completes the go-plugin
// handshake, in which the plugin picks the newest protocol version both
// sides speak. ctx bounds the launch only, not the life of the process;
// end that with Close and Kill.
func Launch(ctx context.Context, cfg Config) (*Plugin, error) {
	if cfg.Path == "" {
		return nil, errors.New("launch sink plugin: no executable path")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("sink", cfg.SinkID)
	hlog := newHCLogSlog(log)
	ccfg, err := clientConfig(ctx, cfg, hlog)
	if err != nil {
		return nil, fmt.Errorf("launch sink plugin %s: %w", cfg.Path, err)
	}
	client := plugin.NewClient(ccfg)
	rpc, err := client.Client()
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("launch sink plugin %s: %w", cfg.Path, versionError(err, ccfg.VersionedPlugins))
	}
	raw, err := rpc.Dispense(wire.PluginName)
	if err != nil {
		client.Kill()
		return nil, fmt.Errorf("launch sink plugin %s: dispense %q: %w", cfg.Path, wire.PluginName, err)
	}
	c := raw.(*grpcClient)
	return &Plugin{client: client, conn: c.conn, calls: c.calls, version: c.version, deliverMethod: c.deliverMethod,
		log: log, cfg: cfg, exit: hlog.exit}, nil
}

// clientConfig is how go-plugin launches the plugin cfg names: the
// command with its environment, the checksum, the versions offered.
func clientConfig(ctx context.Context, cfg Config, hlog *hclogSlog) (*plugin.ClientConfig, error) {
	var secure *plugin.SecureConfig
	if cfg.SHA256 != "" {
		sum, err := hex.DecodeString(cfg.SHA256)
		if err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("SHA256 %q is not a hex SHA-256", cfg.SHA256)
		}
		secure = &plugin.SecureConfig{Checksum: sum, Hash: sha256.New()}
	}
	stdout := cfg.Stdout
	if stdout == nil {
		stdout = os.Stdout
	}
	startTimeout := cfg.StartTimeout
	if startTimeout <= 0 {
		startTimeout = time.Minute
	}
	if dl, ok := ctx.Deadline(); ok {
		startTimeout = min(startTimeout, time.Until(dl))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	cmd := exec.Command(cfg.Path)
	// The plugin gets the log level we keep, then an allowlisted part of
	// our environment (SkipHostEnv below; a WALCAST_PLUGIN_LOG_LEVEL there
	// overrides ours), then the sink's own variables. For a repeated name
	// the last one counts.
	cmd.Env = []string{wire.EnvLogLevel + "=" + hlog.GetLevel().String()}
	cmd.Env = append(cmd.Env, AllowedEnv(os.Environ())...)
	cmd.Env = append(cmd.Env, cfg.Env...)
	if f, ok := stdout.(*os.File); ok && runtime.GOOS != "windows" {
		cmd.ExtraFiles = []*os.File{f} // descriptor 3 in the plugin
		cmd.Env = append(cmd.Env, stdoutFDEnv+"=3")
	}
	cmd.SysProcAttr = sysProcAttr()

	versions := cfg.protocols
	if versions == nil {
		versions = protocols
	}
	sets := make(map[int]plugin.PluginSet, len(versions))
	for _, v := range versions {
		sets[v] = plugin.PluginSet{wire.PluginName: &grpcPlugin{version: v}}
	}
	return &plugin.ClientConfig{
		HandshakeConfig:  wire.Handshake(),
		VersionedPlugins: sets,
		Cmd:              cmd,
		SecureConfig:     secure,
		SkipHostEnv:      true,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		StartTimeout:     startTimeout,
		GRPCDialOptions:  wire.ClientOptions(),
		Logger:           hlog,
		SyncStdout:       stdout,
		SyncStderr:       newLineLogger(hlog),
	}, nil
}

// incompatibleVersion is go-plugin's refusal of a plugin that answered
// the handshake with a protocol version the host did not offer.
var incompatibleVersion = regexp.MustCompile(`(?i)incompatible API version with plugin\. Plugin version: (\d+)`)

// versionError turns go-plugin's refusal of a plugin's protocol version
// into one that names both sides' versions and what to do; any other
// error is returned as it is.
func versionError(err error, offered map[int]plugin.PluginSet) error {
	m := incompatibleVersion.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	theirs, _ := strconv.Atoi(m[1])
	ours := make([]int, 0, len(offered))
	for v := range offered {
		ours = append(ours, v)
	}
	slices.Sort(ours)
	names := make([]string, len(ours))
	for i, v := range ours {
		names[i] = strconv.Itoa(v)
	}
	advice := "upgrade walcast, or have the plugin speak an older version (pluginkit.Serve serves a pluginkit.Sink over every version)"
	if theirs < ours[0] {
		advice = "rebuild the plugin against a newer pluginkit"
	}
	return fmt.Errorf("the plugin speaks sink protocol version %d and this walcast speaks version %s: %s (%w)",
		theirs, strings.Join(names, " and "), advice, err)
}

// grpcPlugin is the client half of the plugin set of one protocol
// version; pluginkit has the server half.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	version int
}

var _ plugin.GRPCPlugin = (*grpcPlugin)(nil)

func (*grpcPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return errors.New("sinkclient is the host side and serves nothing")
}

func (p *grpcPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	c := &grpcClient{conn: conn, version: p.version}
	switch p.version {
	case wire.ProtocolV2:
		c.calls, c.deliverMethod = sinkv2.NewSinkClient(conn), sinkv2.Sink_Deliver_FullMethodName
	default:
		c.calls, c.deliverMethod = sinkv1.NewSinkClient(conn), sinkv1.Sink_Deliver_FullMethodName
	}
	return c, nil
}

// grpcClient is what the plugin set dispenses: the negotiated version's
// client, and the connection for Deliver (sent without the generated
// types) and health checks.
type grpcClient struct {
	conn          *grpc.ClientConn
	calls         lifecycle
	version       int
	deliverMethod string
}

// Version is the sink protocol version the plugin speaks (wire.ProtocolV1
// or wire.ProtocolV2).
func (p *Plugin) Version() int { return p.version }

// Info asks the plugin to describe itself.
func (p *Plugin) Info(ctx context.Context) (pluginkit.Info, error) {
	resp, err := p.calls.Describe(ctx, &sinkv1.DescribeRequest{})
	if err != nil {
		return pluginkit.Info{}, callError(ctx, "describe", err)
	}
	info := pluginkit.Info{
		Name:      resp.GetName(),
		Version:   resp.GetVersion(),
		Ordered:   resp.GetOrdered(),
		BatchSize: int(resp.GetBatchSize()),
		Routes:    resp.GetRoutes(), // false from a plugin that predates it: no routes
		Config:    make([]pluginkit.ConfigField, 0, len(resp.GetConfig())),
	}
	for _, f := range resp.GetConfig() {
		info.Config = append(info.Config, pluginkit.ConfigField{
			Name:     f.GetName(),
			Type:     pluginkit.FieldType(f.GetType()),
			Required: f.GetRequired(),
			Doc:      f.GetDoc(),
		})
	}
	return info, nil
}

// Configure passes the sink's config block, encoded as a JSON object. A
// rejected attribute comes back as a *pluginkit.ConfigError.
func (p *Plugin) Configure(ctx context.Context, config json.RawMessage) error {
	if _, err := p.calls.Configure(ctx, &sinkv1.ConfigureRequest{Config: config, Pipeline: p.cfg.Pipeline, SinkId: p.cfg.SinkID, Tables: p.cfg.Tables}); err != nil {
		return callError(ctx, "configure", err)
	}
	return nil
}

// Open makes the sink connect to its destination.
func (p *Plugin) Open(ctx context.Context) (pluginkit.OpenResult, error) {
	resp, err := p.calls.Open(ctx, &sinkv1.OpenRequest{})
	if err != nil {
		return pluginkit.OpenResult{}, callError(ctx, "open", err)
	}
	var res pluginkit.OpenResult
	if cp := resp.GetCheckpoint(); cp != "" {
		id, err := pluginkit.ParseEventID(cp)
		if err != nil {
			return pluginkit.OpenResult{}, attempt.Permanent(fmt.Errorf("open: sink reported an invalid checkpoint: %w", err))
		}
		res.Checkpoint, res.Epoch = id, resp.GetCheckpointEpoch()
	}
	return res, nil
}

// Deliver hands one batch to the sink and reads its answer in the
// negotiated protocol version (see package attempt for what the result
// and the error mean). A plugin that died mid-call gives a retryable
// error.
func (p *Plugin) Deliver(ctx context.Context, b attempt.Batch) (attempt.Result, error) {
	// Sent as a wire.DeliverBatch, which the codec encodes straight into
	// the DeliverRequest wire format both versions share.
	req := wire.DeliverBatch{Events: b.Events, GapBefore: b.GapBefore, Replay: b.Replay, Epoch: b.Epoch}
	if p.version == wire.ProtocolV1 {
		var resp sinkv1.DeliverResponse
		if err := p.conn.Invoke(ctx, p.deliverMethod, req, &resp); err != nil {
			return attempt.Result{}, callError(ctx, "deliver", err)
		}
		return attempt.Result{Duplicates: int(resp.GetDuplicates())}, nil
	}
	var resp sinkv2.DeliverResponse
	if err := p.conn.Invoke(ctx, p.deliverMethod, req, &resp); err != nil {
		return attempt.Result{}, callError(ctx, "deliver", err)
	}
	return resultOf(&resp, len(b.Events))
}

// Close asks the sink to release what Open acquired. The process keeps
// running until Kill.
func (p *Plugin) Close(ctx context.Context) error {
	if _, err := p.calls.Close(ctx, &sinkv1.CloseRequest{}); err != nil {
		return callError(ctx, "close", err)
	}
	return nil
}

// callError turns the error of a call to the plugin into an error naming
// the call (see fromStatus). When the caller's context has ended it is wrapped too:
// the plugin sees the same deadline and may answer with its own failure a
// moment before gRPC reports the deadline, and the caller must still be able
// to tell that its deadline passed.
func callError(ctx context.Context, op string, err error) error {
	err = fromStatus(err)
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%s: %w (%w)", op, err, cerr)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Kill ends the plugin process: go-plugin asks it to shut down and kills
// it if it has not exited within two seconds. Kill blocks until then.
func (p *Plugin) Kill() { p.client.Kill() }

// exitError is how the plugin process ended ("signal: killed", "exit
// status 2"), "" while it runs or when it exited cleanly. Reliable after
// Kill, which waits for go-plugin to have reaped and logged it.
func (p *Plugin) exitError() string { return p.exit.get() }

// Exited reports whether the plugin process has exited.
func (p *Plugin) Exited() bool { return p.client.Exited() }

// Pid returns the plugin's process id, or 0 once it is gone.
func (p *Plugin) Pid() int {
	if rc := p.client.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

// healthTimeout bounds the liveness check after a failed call.
const healthTimeout = 2 * time.Second

// alive reports whether the plugin process still runs and answers
// go-plugin's health service. Exited alone lags behind the broken
// connection that the failed call already saw.
func (p *Plugin) alive(ctx context.Context) bool {
	if p.client.Exited() {
		return false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), healthTimeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(p.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: plugin.GRPCServiceName})
	return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
}
