package pluginkit

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/walcast/walcast/proto/sink/wire"
)

// What a sink returns reaches the host as the fault its kind calls for,
// with its text verbatim.
func TestToStatus(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want wire.Fault
	}{
		{"plain error is retryable", errors.New("connection reset"), wire.Fault{Kind: wire.FaultRetryable}},
		{"retryable", Retryable(errors.New("503 from receiver")), wire.Fault{Kind: wire.FaultRetryable}},
		{"permanent", Permanent(errors.New("413 payload too large")), wire.Fault{Kind: wire.FaultPermanent}},
		{"fatal", Fatal(errors.New("fenced")), wire.Fault{Kind: wire.FaultFatal}},
		{"throttled", Throttled(7*time.Second, errors.New("429")), wire.Fault{Kind: wire.FaultThrottled, RetryAfter: 7 * time.Second}},
		{"wrapped throttled", fmt.Errorf("post batch: %w", Throttled(1500*time.Millisecond, nil)), wire.Fault{Kind: wire.FaultThrottled, RetryAfter: 1500 * time.Millisecond}},
		{"wrapped permanent", fmt.Errorf("post batch: %w", Permanent(errors.New("bad"))), wire.Fault{Kind: wire.FaultPermanent}},
		{"config error", &ConfigError{Field: "url", Msg: "scheme must be http or https"}, wire.Fault{Kind: wire.FaultConfig, Violations: []wire.Violation{{Field: "url", Msg: "scheme must be http or https"}}}},
		{"wrapped config error", fmt.Errorf("configure: %w", &ConfigError{Field: "timeout", Msg: "not a duration"}), wire.Fault{Kind: wire.FaultConfig, Violations: []wire.Violation{{Field: "timeout", Msg: "not a duration"}}}},
		{"several config errors", errors.Join(&ConfigError{Table: "public.café", Msg: "collides"}, fmt.Errorf("wrapped: %w", &ConfigError{Field: "topics", Table: "public.x", Msg: "bad override"})),
			wire.Fault{Kind: wire.FaultConfig, Violations: []wire.Violation{{Table: "public.café", Msg: "collides"}, {Field: "topics", Table: "public.x", Msg: "bad override"}}}},
		// A status the sink received from a downstream gRPC service must not
		// leak through as if it were ours.
		{"downstream status", status.Error(codes.InvalidArgument, "receiver rejected"), wire.Fault{Kind: wire.FaultRetryable}},
	}
	for _, tt := range tests {
		want := tt.want
		want.Msg = tt.err.Error()
		if got := wire.FaultOf(toStatus(tt.err)); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, want %+v", tt.name, got, want)
		}
	}
	if toStatus(nil) != nil {
		t.Error("toStatus(nil) is not nil")
	}
}
