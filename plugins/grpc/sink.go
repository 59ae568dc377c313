package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/walcast/walcast/pluginkit"
	receiverv1 "github.com/walcast/walcast/proto/receiver/v1"
)

// maxRequestBytes is the largest request the sink sends: the 64 MiB
// receivers are asked to accept (see receiver.proto; gRPC's default send
// limit is effectively unlimited, but receivers default to accepting
// 4 MiB). The host's batches stay far below it (16 MiB by default); a
// single larger event is refused as permanent, so it is parked at once.
const maxRequestBytes = 64 << 20

// reconnectBackoff replaces gRPC's default reconnect backoff, which grows
// to two minutes: the host owns the retry policy, and a receiver that is
// back should be reached by its next attempt, not two minutes later. With
// the jitter, a connection is retried at least every 5 s (docs/sinks.md).
var reconnectBackoff = backoff.Config{
	BaseDelay:  250 * time.Millisecond,
	Multiplier: 1.6,
	Jitter:     0.2,
	MaxDelay:   4 * time.Second,
}

// Sink delivers batches to one Receiver service.
type Sink struct {
	log *slog.Logger

	mu     sync.Mutex // guards the fields below against Configure, Open and Close during Deliver
	cfg    settings
	id     pluginkit.Identity
	conn   *grpc.ClientConn // nil until Open, and after Close
	client receiverv1.ReceiverClient
}

// Interface guards.
var (
	_ pluginkit.BatchSink           = (*Sink)(nil)
	_ credentials.PerRPCCredentials = bearerToken{}
)

// New returns a grpc sink that logs through pluginkit.NewLogger.
func New() *Sink { return newSink(pluginkit.NewLogger()) }

func newSink(log *slog.Logger) *Sink { return &Sink{log: log} }

// Info describes the sink.
func (s *Sink) Info() pluginkit.Info {
	return pluginkit.Info{
		Name:    "grpc",
		Version: pluginkit.BuildVersion(),
		Config:  configFields,
	}
}

// Configure validates the config and reads the TLS files it names; it
// opens no connection. The sink's identity names it to the receiver.
func (s *Sink) Configure(_ context.Context, setup pluginkit.Setup) error {
	st, err := decodeConfig(setup.Config)
	if err != nil {
		return err
	}
	id := setup.Sink
	s.mu.Lock()
	s.cfg, s.id = st, id
	s.mu.Unlock()
	s.log.Info("grpc sink configured", "address", st.address, "tls", st.tls != nil,
		"client_cert", st.tls != nil && len(st.tls.Certificates) > 0, "token", st.token != "", "timeout", st.timeout.String())
	return nil
}

// Open creates the client connection and starts connecting in the
// background. It does not wait for the receiver, which may well be down
// while walcast starts: deliveries fail and are retried until it is up.
func (s *Sink) Open(context.Context) (pluginkit.OpenResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.address == "" {
		return pluginkit.OpenResult{}, errors.New("open before configure")
	}
	if s.conn != nil {
		return pluginkit.OpenResult{}, nil // already open
	}
	conn, err := grpc.NewClient(s.cfg.address, dialOptions(s.cfg)...)
	if err != nil {
		return pluginkit.OpenResult{}, fmt.Errorf("create client for %s: %w", s.cfg.address, err)
	}
	conn.Connect()
	s.conn, s.client = conn, receiverv1.NewReceiverClient(conn)
	return pluginkit.OpenResult{}, nil
}

// dialOptions turns the settings into the client connection's options.
func dialOptions(st settings) []grpc.DialOption {
	creds := insecure.NewCredentials()
	if st.tls != nil {
		creds = credentials.NewTLS(st.tls)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(maxRequestBytes)),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: reconnectBackoff, MinConnectTimeout: 20 * time.Second}),
		grpc.WithUserAgent("walcast-sink-grpc/" + pluginkit.BuildVersion()),
	}
	if st.token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearerToken{token: st.token, requireTLS: !st.tokenInClear}))
	}
	return opts
}

// Deliver sends the batch as one call. A nil error means the receiver
// answered OK, which it promises to do only once every event is durably
// processed.
func (s *Sink) Deliver(ctx context.Context, b pluginkit.Batch) (pluginkit.DeliverResult, error) {
	events := b.Events
	if len(events) == 0 {
		return pluginkit.DeliverResult{}, nil
	}
	s.mu.Lock()
	cfg, id, client := s.cfg, s.id, s.client
	s.mu.Unlock()
	what := fmt.Sprintf("deliver %d events to %s", len(events), cfg.address)
	if client == nil {
		// Never permanent: nothing is wrong with the events.
		return pluginkit.DeliverResult{}, pluginkit.Retryable(fmt.Errorf("%s: sink is not open", what))
	}

	req := newRequest(id, events)
	if n := proto.Size(req); n > maxRequestBytes {
		// Permanent, so that the host splits the batch; a single event
		// this large is parked, as it can never be sent.
		return pluginkit.DeliverResult{}, pluginkit.Permanent(fmt.Errorf("%s: request of %d bytes exceeds the %d-byte message limit", what, n, maxRequestBytes))
	}

	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	resp, err := client.Deliver(ctx, req)
	if err != nil {
		err = classify(what, err)
		if kind, after := pluginkit.KindOf(err); kind == pluginkit.KindThrottled {
			s.log.Debug("receiver throttled", "retry_after", after.String())
		}
		return pluginkit.DeliverResult{}, err
	}
	// The count is the receiver's; keep it within what the host can use.
	dups := min(max(resp.GetDuplicates(), 0), int64(len(events)))
	return pluginkit.DeliverResult{Duplicates: int(dups)}, nil
}

// newRequest converts a batch into the receiver's request. The key and
// payload bytes are shared, not copied: the events are the sink's to keep.
func newRequest(id pluginkit.Identity, events []pluginkit.Event) *receiverv1.DeliverRequest {
	pb := make([]receiverv1.Event, len(events)) // one allocation for the whole batch
	req := &receiverv1.DeliverRequest{
		Pipeline: id.Pipeline,
		Sink:     id.SinkID,
		Events:   make([]*receiverv1.Event, len(events)),
	}
	for i, e := range events {
		pb[i].Id = e.ID.String()
		pb[i].Schema = e.Schema
		pb[i].Table = e.Table
		pb[i].Op = string(e.Op)
		pb[i].Key = e.Key
		pb[i].Payload = e.Payload
		req.Events[i] = &pb[i]
	}
	return req
}

// Close closes the connection; calls in flight fail and are retried by the
// host. Closing a sink that is not open does nothing.
func (s *Sink) Close(context.Context) error {
	s.mu.Lock()
	conn, addr := s.conn, s.cfg.address
	s.conn, s.client = nil, nil
	s.mu.Unlock()
	if conn == nil {
		return nil
	}
	if err := conn.Close(); err != nil {
		return fmt.Errorf("close connection to %s: %w", addr, err)
	}
	return nil
}

// bearerToken sends the configured token with every call.
type bearerToken struct {
	token string
	// requireTLS makes gRPC itself refuse to send the token over a
	// plaintext connection: a second guard behind Configure's check.
	requireTLS bool
}

func (b bearerToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

func (b bearerToken) RequireTransportSecurity() bool { return b.requireTLS }
