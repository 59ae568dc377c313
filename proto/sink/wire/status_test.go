package wire

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestFaultRoundTrip(t *testing.T) {
	for _, f := range []Fault{
		{Kind: FaultRetryable, Msg: "503 from receiver"},
		{Kind: FaultPermanent, Msg: "413 payload too large"},
		{Kind: FaultFatal, Msg: "fenced"},
		{Kind: FaultThrottled, Msg: "429", RetryAfter: 7 * time.Second},
		{Kind: FaultThrottled, Msg: "slow down", RetryAfter: 1500 * time.Millisecond},
		{Kind: FaultConfig, Msg: "url: scheme must be http or https", Violations: []Violation{{Field: "url", Msg: "scheme must be http or https"}}},
		{Kind: FaultConfig, Msg: "three problems", Violations: []Violation{
			{Table: "public.café", Msg: "collides"}, {Field: "topics", Table: "public.x", Msg: "bad override"}, {Field: "brokers", Msg: "required"},
		}},
	} {
		if got := FaultOf(f.Err()); !reflect.DeepEqual(got, f) {
			t.Errorf("FaultOf(%+v.Err()) = %+v", f, got)
		}
	}
}

func TestFaultCodes(t *testing.T) {
	for kind, code := range map[FaultKind]codes.Code{
		FaultRetryable: codes.Unavailable, FaultThrottled: codes.ResourceExhausted,
		FaultPermanent: codes.FailedPrecondition, FaultFatal: codes.Aborted, FaultConfig: codes.InvalidArgument,
	} {
		if got := status.Code(Fault{Kind: kind, Msg: "x"}.Err()); got != code {
			t.Errorf("kind %d: code %s, want %s", kind, got, code)
		}
	}
}

// What the host reads from errors no plugin sent on purpose.
func TestFaultOfHostSide(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Fault
	}{
		{"transport failure", errors.New("connection refused"), Fault{Kind: FaultRetryable, Msg: "connection refused"}},
		{"unknown code", status.Error(codes.Internal, "boom"), Fault{Kind: FaultRetryable, Msg: "Internal: boom"}},
		{"plugin process gone", status.Error(codes.Unavailable, "error reading from server: EOF"), Fault{Kind: FaultRetryable, Msg: "error reading from server: EOF"}},
		// gRPC reports an oversized message as ResourceExhausted without
		// RetryInfo; pausing and resending would never succeed.
		{"message too large", status.Error(codes.ResourceExhausted, "grpc: received message larger than max"), Fault{Kind: FaultPermanent, Msg: "grpc: received message larger than max (the message is larger than the plugin connection accepts)"}},
		{"invalid argument without field", status.Error(codes.InvalidArgument, "?"), Fault{Kind: FaultRetryable, Msg: "InvalidArgument: ?"}},
		{"deadline", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), Fault{Kind: FaultRetryable, Msg: "context deadline exceeded", Context: context.DeadlineExceeded}},
		{"canceled", status.Error(codes.Canceled, "context canceled"), Fault{Kind: FaultRetryable, Msg: "context canceled", Context: context.Canceled}},
	}
	for _, tt := range tests {
		if got := FaultOf(tt.err); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: FaultOf = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
