package pluginkit

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	sinkv1 "github.com/walcast/walcast/proto/sink/v1"
	"github.com/walcast/walcast/proto/sink/wire"
)

// server adapts a BatchSink (a Sink through legacySink) to the sink
// service of either protocol version (services.go). It is the only place
// on the plugin side where proto types meet domain types, and every error
// leaves through toStatus or, for the events a BatchError names,
// eventFaults.
//
// The context of each call is the gRPC handler's, which carries the host's
// deadline and is cancelled when the host gives up on the call.
type server struct {
	sink BatchSink

	mu     sync.Mutex
	opened bool // Open succeeded and Close has not been called since
}

func (s *server) describe(context.Context, *sinkv1.DescribeRequest) (*sinkv1.DescribeResponse, error) {
	info := s.sink.Info()
	resp := &sinkv1.DescribeResponse{
		Name:    info.Name,
		Version: info.Version,
		Ordered: info.Ordered,
		Routes:  info.Routes,
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

func (s *server) configure(ctx context.Context, req *sinkv1.ConfigureRequest) (*sinkv1.ConfigureResponse, error) {
	setup := Setup{
		Config: json.RawMessage(req.GetConfig()),
		Sink:   Identity{Pipeline: req.GetPipeline(), SinkID: req.GetSinkId()},
		Tables: req.GetTables(),
	}
	if len(setup.Config) == 0 {
		// An absent config block is an empty object, so that sinks can
		// always json.Unmarshal what they are given.
		setup.Config = json.RawMessage("{}")
	}
	if len(setup.Tables) == 0 {
		setup.Tables = nil
	}
	if err := s.sink.Configure(ctx, setup); err != nil {
		return nil, toStatus(err)
	}
	return &sinkv1.ConfigureResponse{}, nil
}

func (s *server) open(ctx context.Context, _ *sinkv1.OpenRequest) (*sinkv1.OpenResponse, error) {
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
		resp.CheckpointEpoch = res.Epoch
	}
	return resp, nil
}

// deliver hands a decoded Deliver request to the sink. The caller encodes
// the answer for its protocol version.
func (s *server) deliver(ctx context.Context, req *wire.DeliverRequest) (DeliverResult, error) {
	return s.sink.Deliver(ctx, Batch{Events: req.Events, Replay: req.Replay, GapBefore: req.GapBefore, Epoch: req.Epoch})
}

func (s *server) close(ctx context.Context, _ *sinkv1.CloseRequest) (*sinkv1.CloseResponse, error) {
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

// toStatus converts an error returned by a sink into the gRPC status error
// the host receives. It classifies err by its pluginkit kind only; a gRPC
// status the sink itself received from a downstream service is not passed
// through, so that a downstream InvalidArgument cannot be mistaken for a
// config error. A nil err gives nil.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	return faultOf(err).Err()
}

// faultOf classifies a sink's error as the fault that travels for it.
func faultOf(err error) wire.Fault {
	f := wire.Fault{Msg: err.Error()}
	if ces := ConfigErrors(err); len(ces) > 0 {
		f.Kind = wire.FaultConfig
		for _, ce := range ces {
			f.Violations = append(f.Violations, wire.Violation{Field: ce.Field, Msg: ce.Msg, Table: ce.Table})
		}
		return f
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
	return f
}

// eventFaults converts the events a BatchError names into the faults a
// version 2 answer carries. A fatal event, or no event named, fails the
// batch as a whole: whole is then that batch's fault.
func eventFaults(be *BatchError) (faults []wire.EventFault, whole *wire.Fault) {
	for _, i := range be.indexes() {
		f := faultOf(be.Failed[i])
		switch f.Kind {
		case wire.FaultFatal:
			return nil, &f
		case wire.FaultConfig:
			f.Kind = wire.FaultRetryable // config errors belong to Configure
		}
		faults = append(faults, wire.EventFault{Index: i, Fault: f})
	}
	if len(faults) == 0 {
		return nil, &wire.Fault{Kind: wire.FaultRetryable, Msg: be.Error()}
	}
	return faults, nil
}

// batchFault is a BatchError as a version 1 answer, which can only fail
// the batch as a whole: throttled when an event asked for a pause (the
// longest), else retryable when one event may yet succeed, else permanent
// (the host then isolates the events that fail on their own).
func batchFault(be *BatchError) wire.Fault {
	faults, whole := eventFaults(be)
	if whole != nil {
		return *whole
	}
	out := wire.Fault{Kind: wire.FaultPermanent, Msg: be.Error()}
	for _, f := range faults {
		switch {
		case f.Kind == wire.FaultThrottled:
			out.Kind, out.RetryAfter = wire.FaultThrottled, max(out.RetryAfter, f.RetryAfter)
		case f.Kind == wire.FaultRetryable && out.Kind == wire.FaultPermanent:
			out.Kind = wire.FaultRetryable
		}
	}
	return out
}
