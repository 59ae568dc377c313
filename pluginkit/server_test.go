package pluginkit

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/walcast/walcast/pluginkit/protocol"
)

// What a sink returns reaches the host as the fault its kind calls for,
// with its text verbatim.
func TestToStatus(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want protocol.Fault
	}{
		{"plain error is retryable", errors.New("connection reset"), protocol.Fault{Kind: protocol.FaultRetryable}},
		{"retryable", Retryable(errors.New("503 from receiver")), protocol.Fault{Kind: protocol.FaultRetryable}},
		{"permanent", Permanent(errors.New("413 payload too large")), protocol.Fault{Kind: protocol.FaultPermanent}},
		{"fatal", Fatal(errors.New("fenced")), protocol.Fault{Kind: protocol.FaultFatal}},
		{"throttled", Throttled(7*time.Second, errors.New("429")), protocol.Fault{Kind: protocol.FaultThrottled, RetryAfter: 7 * time.Second}},
		{"wrapped throttled", fmt.Errorf("post batch: %w", Throttled(1500*time.Millisecond, nil)), protocol.Fault{Kind: protocol.FaultThrottled, RetryAfter: 1500 * time.Millisecond}},
		{"wrapped permanent", fmt.Errorf("post batch: %w", Permanent(errors.New("bad"))), protocol.Fault{Kind: protocol.FaultPermanent}},
		{"config error", &ConfigError{Field: "url", Msg: "scheme must be http or https"}, protocol.Fault{Kind: protocol.FaultConfig, Violations: []protocol.Violation{{Field: "url", Msg: "scheme must be http or https"}}}},
		{"wrapped config error", fmt.Errorf("configure: %w", &ConfigError{Field: "timeout", Msg: "not a duration"}), protocol.Fault{Kind: protocol.FaultConfig, Violations: []protocol.Violation{{Field: "timeout", Msg: "not a duration"}}}},
		{"several config errors", errors.Join(&ConfigError{Table: "public.café", Msg: "collides"}, fmt.Errorf("wrapped: %w", &ConfigError{Field: "topics", Table: "public.x", Msg: "bad override"})),
			protocol.Fault{Kind: protocol.FaultConfig, Violations: []protocol.Violation{{Table: "public.café", Msg: "collides"}, {Field: "topics", Table: "public.x", Msg: "bad override"}}}},
		// A status the sink received from a downstream gRPC service must not
		// leak through as if it were ours.
		{"downstream status", status.Error(codes.InvalidArgument, "receiver rejected"), protocol.Fault{Kind: protocol.FaultRetryable}},
	}
	for _, tt := range tests {
		want := tt.want
		want.Msg = tt.err.Error()
		if got := protocol.FaultOf(toStatus(tt.err)); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, want %+v", tt.name, got, want)
		}
	}
	if toStatus(nil) != nil {
		t.Error("toStatus(nil) is not nil")
	}
}
