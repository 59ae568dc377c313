package pluginkit

import (
	"context"
	"errors"
	"slices"

	"google.golang.org/grpc"

	sinkv1 "github.com/walcast/walcast/proto/sink/v1"
	sinkv2 "github.com/walcast/walcast/proto/sink/v2"
	"github.com/walcast/walcast/proto/sink/wire"
)

// The sink service of each protocol version over one server. Both
// versions share every message but Deliver's answer, so each service only
// forwards to the server and encodes that answer. Deliver reaches them
// through deliverHandler, which decodes the request straight into events
// (wire.DeliverRequest) instead of the generated types.

// v1Service serves walcast.sink.v1: a BatchError fails the whole batch.
type v1Service struct {
	sinkv1.UnimplementedSinkServer
	srv *server
}

func (v v1Service) Describe(ctx context.Context, r *sinkv1.DescribeRequest) (*sinkv1.DescribeResponse, error) {
	return v.srv.describe(ctx, r)
}

func (v v1Service) Configure(ctx context.Context, r *sinkv1.ConfigureRequest) (*sinkv1.ConfigureResponse, error) {
	return v.srv.configure(ctx, r)
}

func (v v1Service) Open(ctx context.Context, r *sinkv1.OpenRequest) (*sinkv1.OpenResponse, error) {
	return v.srv.open(ctx, r)
}

func (v v1Service) Close(ctx context.Context, r *sinkv1.CloseRequest) (*sinkv1.CloseResponse, error) {
	return v.srv.close(ctx, r)
}

func (v v1Service) deliverWire(ctx context.Context, req *wire.DeliverRequest) (any, error) {
	res, err := v.srv.deliver(ctx, req)
	if be := (*BatchError)(nil); errors.As(err, &be) {
		return nil, batchFault(be).Err()
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return &sinkv1.DeliverResponse{Duplicates: int64(res.Duplicates)}, nil
}

// v2Service serves walcast.sink.v2: a BatchError's events travel in the
// answer, each with its fault.
type v2Service struct {
	sinkv2.UnimplementedSinkServer
	srv *server
}

func (v v2Service) Describe(ctx context.Context, r *sinkv1.DescribeRequest) (*sinkv1.DescribeResponse, error) {
	return v.srv.describe(ctx, r)
}

func (v v2Service) Configure(ctx context.Context, r *sinkv1.ConfigureRequest) (*sinkv1.ConfigureResponse, error) {
	return v.srv.configure(ctx, r)
}

func (v v2Service) Open(ctx context.Context, r *sinkv1.OpenRequest) (*sinkv1.OpenResponse, error) {
	return v.srv.open(ctx, r)
}

func (v v2Service) Close(ctx context.Context, r *sinkv1.CloseRequest) (*sinkv1.CloseResponse, error) {
	return v.srv.close(ctx, r)
}

func (v v2Service) deliverWire(ctx context.Context, req *wire.DeliverRequest) (any, error) {
	res, err := v.srv.deliver(ctx, req)
	resp := &sinkv2.DeliverResponse{Duplicates: int64(res.Duplicates)}
	if be := (*BatchError)(nil); errors.As(err, &be) {
		faults, whole := eventFaults(be)
		if whole != nil {
			return nil, whole.Err()
		}
		resp.Failed = wire.EncodeEventFaults(faults)
		return resp, nil
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return resp, nil
}

// wireDeliverer is a service whose Deliver deliverHandler calls.
type wireDeliverer interface {
	deliverWire(ctx context.Context, req *wire.DeliverRequest) (any, error)
}

// serviceDesc returns the service of protocol version v (wire.ProtocolV1
// or wire.ProtocolV2) with Deliver routed through deliverHandler, and the
// value that serves it.
func serviceDesc(v int, srv *server) (*grpc.ServiceDesc, any) {
	desc, impl, method := sinkv1.Sink_ServiceDesc, any(v1Service{srv: srv}), sinkv1.Sink_Deliver_FullMethodName
	if v == wire.ProtocolV2 {
		desc, impl, method = sinkv2.Sink_ServiceDesc, v2Service{srv: srv}, sinkv2.Sink_Deliver_FullMethodName
	}
	desc.Methods = slices.Clone(desc.Methods)
	for i := range desc.Methods {
		if desc.Methods[i].MethodName == "Deliver" {
			desc.Methods[i].Handler = deliverHandler(method)
		}
	}
	return &desc, impl
}

// deliverHandler decodes a Deliver request with the protocol's codec and
// hands it to the service.
func deliverHandler(fullMethod string) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(wire.DeliverRequest)
		if err := dec(in); err != nil {
			// The host sent something it can never send correctly again.
			return nil, toStatus(Permanent(err))
		}
		svc := srv.(wireDeliverer)
		call := func(ctx context.Context, req any) (any, error) {
			return svc.deliverWire(ctx, req.(*wire.DeliverRequest))
		}
		if interceptor == nil {
			return call(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod}, call)
	}
}
