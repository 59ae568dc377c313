package pluginkit

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestStatusRoundTrip(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		code      codes.Code
		kind      Kind
		after     time.Duration
		wantField string // non-empty: expect a *ConfigError with this field
	}{
		{name: "plain error is retryable", err: errors.New("connection reset"), code: codes.Unavailable, kind: KindRetryable},
		{name: "retryable", err: Retryable(errors.New("503 from receiver")), code: codes.Unavailable, kind: KindRetryable},
		{name: "permanent", err: Permanent(errors.New("413 payload too large")), code: codes.FailedPrecondition, kind: KindPermanent},
		{name: "fatal", err: Fatal(errors.New("fenced")), code: codes.Aborted, kind: KindFatal},
		{name: "throttled", err: Throttled(7*time.Second, errors.New("429")), code: codes.ResourceExhausted, kind: KindThrottled, after: 7 * time.Second},
		{name: "wrapped throttled", err: fmt.Errorf("post batch: %w", Throttled(1500*time.Millisecond, nil)), code: codes.ResourceExhausted, kind: KindThrottled, after: 1500 * time.Millisecond},
		{name: "wrapped permanent", err: fmt.Errorf("post batch: %w", Permanent(errors.New("bad"))), code: codes.FailedPrecondition, kind: KindPermanent},
		{name: "config error", err: &ConfigError{Field: "url", Msg: "scheme must be http or https"}, code: codes.InvalidArgument, kind: KindRetryable, wantField: "url"},
		{name: "wrapped config error", err: fmt.Errorf("configure: %w", &ConfigError{Field: "timeout", Msg: "not a duration"}), code: codes.InvalidArgument, kind: KindRetryable, wantField: "timeout"},
		// A status the sink received from a downstream gRPC service must not
		// leak through as if it were ours.
		{name: "downstream status", err: status.Error(codes.InvalidArgument, "receiver rejected"), code: codes.Unavailable, kind: KindRetryable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wire := StatusFromError(tt.err)
			if got := status.Code(wire); got != tt.code {
				t.Fatalf("code = %s, want %s", got, tt.code)
			}
			back := ErrorFromStatus(wire)
			if back == nil {
				t.Fatal("ErrorFromStatus returned nil")
			}
			if back.Error() != tt.err.Error() {
				t.Errorf("message = %q, want %q", back.Error(), tt.err.Error())
			}
			var ce *ConfigError
			if tt.wantField != "" {
				if !errors.As(back, &ce) {
					t.Fatalf("%v is not a *ConfigError", back)
				}
				var orig *ConfigError
				errors.As(tt.err, &orig)
				if ce.Field != tt.wantField || ce.Msg != orig.Msg {
					t.Errorf("ConfigError = {%q, %q}, want {%q, %q}", ce.Field, ce.Msg, tt.wantField, orig.Msg)
				}
				return
			}
			if errors.As(back, &ce) {
				t.Errorf("%v unexpectedly is a *ConfigError", back)
			}
			kind, after := KindOf(back)
			if kind != tt.kind || after != tt.after {
				t.Errorf("KindOf = %s, %s; want %s, %s", kind, after, tt.kind, tt.after)
			}
		})
	}
}

func TestErrorFromStatusHostSide(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		kind   Kind
		target error
	}{
		{name: "transport failure", err: errors.New("connection refused"), kind: KindRetryable},
		{name: "unknown code", err: status.Error(codes.Internal, "boom"), kind: KindRetryable},
		{name: "plugin process gone", err: status.Error(codes.Unavailable, "error reading from server: EOF"), kind: KindRetryable},
		// gRPC reports an oversized message as ResourceExhausted without
		// RetryInfo; pausing and resending would never succeed, so the
		// event is parked at once.
		{name: "message too large", err: status.Error(codes.ResourceExhausted, "grpc: received message larger than max"), kind: KindPermanent},
		{name: "invalid argument without field", err: status.Error(codes.InvalidArgument, "?"), kind: KindRetryable},
		{name: "deadline", err: status.Error(codes.DeadlineExceeded, "context deadline exceeded"), kind: KindRetryable, target: context.DeadlineExceeded},
		{name: "canceled", err: status.Error(codes.Canceled, "context canceled"), kind: KindRetryable, target: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ErrorFromStatus(tt.err)
			if got == nil {
				t.Fatal("ErrorFromStatus returned nil")
			}
			if kind, _ := KindOf(got); kind != tt.kind {
				t.Errorf("kind = %s, want %s", kind, tt.kind)
			}
			if tt.target != nil && !errors.Is(got, tt.target) {
				t.Errorf("%v does not wrap %v", got, tt.target)
			}
			var ce *ConfigError
			if errors.As(got, &ce) {
				t.Errorf("%v unexpectedly is a *ConfigError", got)
			}
		})
	}
}

func TestStatusNil(t *testing.T) {
	if err := StatusFromError(nil); err != nil {
		t.Errorf("StatusFromError(nil) = %v", err)
	}
	if err := ErrorFromStatus(nil); err != nil {
		t.Errorf("ErrorFromStatus(nil) = %v", err)
	}
}
