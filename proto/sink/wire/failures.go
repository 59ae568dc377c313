package wire

import (
	"fmt"

	"google.golang.org/protobuf/types/known/durationpb"

	sinkv2 "github.com/walcast/walcast/proto/sink/v2"
)

// A version 2 Deliver answers with the events of the batch that failed
// (sink.v2.DeliverResponse.failed), each with its own fault. This file is
// the one place that maps them, as status.go is for a whole call:
//
//	FaultRetryable  ↔ FAILURE_RETRYABLE
//	FaultThrottled  ↔ FAILURE_THROTTLED + retry_after
//	FaultPermanent  ↔ FAILURE_PERMANENT
//
// A single event cannot be fatal or a config error: a sink that cannot go
// on fails the whole call.

// EventFault is one failed event of a version 2 Deliver: its index in the
// batch and its fault (Kind FaultRetryable, FaultThrottled or
// FaultPermanent).
type EventFault struct {
	Index int
	Fault
}

// EncodeEventFaults returns the failed events of a sink.v2.DeliverResponse.
// A kind outside the mapping travels as retryable.
func EncodeEventFaults(fs []EventFault) []*sinkv2.EventFailure {
	if len(fs) == 0 {
		return nil
	}
	out := make([]*sinkv2.EventFailure, len(fs))
	for i, f := range fs {
		ef := &sinkv2.EventFailure{Index: uint32(f.Index), Message: f.Msg}
		switch f.Kind {
		case FaultThrottled:
			ef.Kind = sinkv2.Failure_FAILURE_THROTTLED
			ef.RetryAfter = durationpb.New(f.RetryAfter)
		case FaultPermanent:
			ef.Kind = sinkv2.Failure_FAILURE_PERMANENT
		default:
			ef.Kind = sinkv2.Failure_FAILURE_RETRYABLE
		}
		out[i] = ef
	}
	return out
}

// DecodeEventFaults reads the failed events of a sink.v2.DeliverResponse
// to a batch of n events. An index outside the batch, or named twice, is
// an error: the answer cannot be trusted, and the host retries the whole
// batch. A kind this version does not know is retryable.
func DecodeEventFaults(fs []*sinkv2.EventFailure, n int) ([]EventFault, error) {
	if len(fs) == 0 {
		return nil, nil
	}
	out := make([]EventFault, len(fs))
	seen := make(map[uint32]bool, len(fs))
	for i, ef := range fs {
		idx := ef.GetIndex()
		if int64(idx) >= int64(n) {
			return nil, fmt.Errorf("the sink named event %d of a batch of %d as failed", idx, n)
		}
		if seen[idx] {
			return nil, fmt.Errorf("the sink named event %d of the batch as failed twice", idx)
		}
		seen[idx] = true
		f := Fault{Kind: FaultRetryable, Msg: ef.GetMessage()}
		switch ef.GetKind() {
		case sinkv2.Failure_FAILURE_THROTTLED:
			f.Kind, f.RetryAfter = FaultThrottled, ef.GetRetryAfter().AsDuration()
		case sinkv2.Failure_FAILURE_PERMANENT:
			f.Kind = FaultPermanent
		}
		out[i] = EventFault{Index: int(idx), Fault: f}
	}
	return out, nil
}
