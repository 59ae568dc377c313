package pluginkit

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"

	sinkv1 "github.com/walcast/walcast/proto/sink/v1"
	"github.com/walcast/walcast/proto/sink/wire"
)

// server adapts a Sink to the generated gRPC service. It is the only place
// on the plugin side where proto types meet domain types, and every error
// leaves through toStatus.
//
// The context of each call is the gRPC handler's, which carries the host's
// deadline and is cancelled when the host gives up on the call.
type server struct {
	sinkv1.UnimplementedSinkServer
	sink Sink

	mu     sync.Mutex
	opened bool // Open succeeded and Close has not been called since
}

var _ sinkv1.SinkServer = (*server)(nil)

func (s *server) Describe(context.Context, *sinkv1.DescribeRequest) (*sinkv1.DescribeResponse, error) {
	info := s.sink.Info()
	resp := &sinkv1.DescribeResponse{
		Name:    info.Name,
		Version: info.Version,
		Ordered: info.Ordered,
		Config:  make([]*sinkv1.ConfigField, 0, len(info.Config)),
	}
	if info.BatchSize > 0 {
		resp.BatchSize = uint32(info.BatchSize)
	}
	for _, f := range info.Config {
		resp.Config = append(resp.Config, &sinkv1.ConfigField{
			Name:     f.Name,
			Type:     string(f.Type),
			Required: f.Required,
			Doc:      f.Doc,
		})
	}
	return resp, nil
}

func (s *server) Configure(ctx context.Context, req *sinkv1.ConfigureRequest) (*sinkv1.ConfigureResponse, error) {
	cfg := json.RawMessage(req.GetConfig())
	if len(cfg) == 0 {
		// An absent config block is an empty object, so that sinks can
		// always json.Unmarshal what they are given.
		cfg = json.RawMessage("{}")
	}
	ctx = WithIdentity(ctx, Identity{Pipeline: req.GetPipeline(), SinkID: req.GetSinkId()})
	if t := req.GetTables(); len(t) > 0 {
		ctx = WithTables(ctx, t)
	}
	if err := s.sink.Configure(ctx, cfg); err != nil {
		return nil, toStatus(err)
	}
	return &sinkv1.ConfigureResponse{}, nil
}

func (s *server) Open(ctx context.Context, _ *sinkv1.OpenRequest) (*sinkv1.OpenResponse, error) {
	res, err := s.sink.Open(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	s.mu.Lock()
	s.opened = true
	s.mu.Unlock()
	resp := &sinkv1.OpenResponse{}
	if !res.Checkpoint.IsZero() {
		resp.Checkpoint = res.Checkpoint.String()
	}
	return resp, nil
}

// Deliver serves the generated interface; the registered service routes
// Deliver through deliverHandler instead, which skips the generated types.
func (s *server) Deliver(ctx context.Context, req *sinkv1.DeliverRequest) (*sinkv1.DeliverResponse, error) {
	events := make([]Event, len(req.GetEvents()))
	for i, e := range req.GetEvents() {
		id, err := ParseEventID(e.GetId())
		if err != nil {
			return nil, toStatus(Permanent(fmt.Errorf("event %d of batch: %w", i, err)))
		}
		events[i] = Event{ID: id, Schema: e.GetSchema(), Table: e.GetTable(), Op: Op(e.GetOp()), Key: e.GetKey(), Payload: e.GetPayload()}
	}
	if req.GetGapBefore() {
		ctx = WithGapBefore(ctx)
	}
	if req.GetReplay() {
		ctx = WithReplay(ctx)
	}
	return s.deliver(ctx, events)
}

func (s *server) deliver(ctx context.Context, events []Event) (*sinkv1.DeliverResponse, error) {
	res, err := s.sink.Deliver(ctx, events)
	if err != nil {
		return nil, toStatus(err)
	}
	return &sinkv1.DeliverResponse{Duplicates: int64(res.Duplicates)}, nil
}

// serviceDesc is sinkv1.Sink_ServiceDesc with Deliver decoded straight into
// events by the protocol's codec (wire.DeliverRequest).
func serviceDesc() *grpc.ServiceDesc {
	desc := sinkv1.Sink_ServiceDesc
	desc.Methods = slices.Clone(desc.Methods)
	for i := range desc.Methods {
		if desc.Methods[i].MethodName == "Deliver" {
			desc.Methods[i].Handler = deliverHandler
		}
	}
	return &desc
}

func deliverHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(wire.DeliverRequest)
	if err := dec(in); err != nil {
		// The host sent something it can never send correctly again.
		return nil, toStatus(Permanent(err))
	}
	s := srv.(*server)
	call := func(ctx context.Context, req any) (any, error) {
		r := req.(*wire.DeliverRequest)
		if r.GapBefore {
			ctx = WithGapBefore(ctx)
		}
		if r.Replay {
			ctx = WithReplay(ctx)
		}
		return s.deliver(ctx, r.Events)
	}
	if interceptor == nil {
		return call(ctx, in)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: sinkv1.Sink_Deliver_FullMethodName}
	return interceptor(ctx, in, info, call)
}

func (s *server) Close(ctx context.Context, _ *sinkv1.CloseRequest) (*sinkv1.CloseResponse, error) {
	s.mu.Lock()
	s.opened = false
	s.mu.Unlock()
	if err := s.sink.Close(ctx); err != nil {
		return nil, toStatus(err)
	}
	return &sinkv1.CloseResponse{}, nil
}

// closeIfOpen closes a sink the host opened but never closed: the host was
// killed, or stopped the plugin without the Close call.
func (s *server) closeIfOpen(timeout time.Duration) {
	s.mu.Lock()
	opened := s.opened
	s.opened = false
	s.mu.Unlock()
	if !opened {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_ = s.sink.Close(ctx) // nobody is left to report the error to
}

// toStatus converts an error returned by a Sink into the gRPC status error
// the host receives. It classifies err by its pluginkit kind only; a gRPC
// status the sink itself received from a downstream service is not passed
// through, so that a downstream InvalidArgument cannot be mistaken for a
// config error. A nil err gives nil.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	f := wire.Fault{Msg: err.Error()}
	if ces := ConfigErrors(err); len(ces) > 0 {
		f.Kind = wire.FaultConfig
		for _, ce := range ces {
			f.Violations = append(f.Violations, wire.Violation{Field: ce.Field, Msg: ce.Msg, Table: ce.Table})
		}
		return f.Err()
	}
	switch kind, after := KindOf(err); kind {
	case KindThrottled:
		f.Kind, f.RetryAfter = wire.FaultThrottled, after
	case KindPermanent:
		f.Kind = wire.FaultPermanent
	case KindFatal:
		f.Kind = wire.FaultFatal
	default:
		f.Kind = wire.FaultRetryable
	}
	return f.Err()
}
