package sinkclient

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/pluginkit"
	sinkv2 "github.com/walcast/walcast/proto/sink/v2"
	"github.com/walcast/walcast/proto/sink/wire"
)

// Several config errors come back as an errors.Join, each with its table,
// so that validate can point at every one.
func TestFromStatusConfigErrors(t *testing.T) {
	f := wire.Fault{Kind: wire.FaultConfig, Msg: "two", Violations: []wire.Violation{{Table: "public.a", Msg: "x"}, {Field: "brokers", Msg: "required"}}}
	got := pluginkit.ConfigErrors(fromStatus(f.Err()))
	if len(got) != 2 || *got[0] != (pluginkit.ConfigError{Table: "public.a", Msg: "x"}) || *got[1] != (pluginkit.ConfigError{Field: "brokers", Msg: "required"}) {
		t.Errorf("got %v", got)
	}
}

// Every fault a plugin can send comes back as the host's error of the
// same kind (a *pluginkit.ConfigError for a config), with the plugin's
// text verbatim.
func TestFromStatus(t *testing.T) {
	tests := []struct {
		fault     wire.Fault
		kind      attempt.Kind
		after     time.Duration
		wantField string
		target    error
	}{
		{fault: wire.Fault{Kind: wire.FaultRetryable, Msg: "503"}, kind: attempt.KindRetry},
		{fault: wire.Fault{Kind: wire.FaultPermanent, Msg: "413"}, kind: attempt.KindPermanent},
		{fault: wire.Fault{Kind: wire.FaultFatal, Msg: "fenced"}, kind: attempt.KindFatal},
		{fault: wire.Fault{Kind: wire.FaultThrottled, Msg: "throttled for 7s: 429", RetryAfter: 7 * time.Second}, kind: attempt.KindThrottle, after: 7 * time.Second},
		{fault: wire.Fault{Kind: wire.FaultConfig, Msg: "url: bad", Violations: []wire.Violation{{Field: "url", Msg: "bad"}}}, wantField: "url"},
	}
	for _, tt := range tests {
		got := fromStatus(tt.fault.Err())
		if got.Error() != tt.fault.Msg {
			t.Errorf("%+v: text %q", tt.fault, got.Error())
		}
		if tt.wantField != "" {
			ce, ok := errors.AsType[*pluginkit.ConfigError](got)
			if !ok || ce.Field != tt.wantField || ce.Msg != tt.fault.Violations[0].Msg {
				t.Errorf("%+v: %#v is not the ConfigError", tt.fault, got)
			}
			continue
		}
		if kind, after := attempt.KindOf(got); kind != tt.kind || after != tt.after {
			t.Errorf("%+v: KindOf = %s, %s", tt.fault, kind, after)
		}
	}
}

func TestFromStatusKeepsCauses(t *testing.T) {
	if err := fromStatus(io.EOF); !errors.Is(err, io.EOF) {
		t.Errorf("a broken connection lost its cause: %v", err)
	}
	if kind, _ := attempt.KindOf(fromStatus(io.EOF)); kind != attempt.KindRetry {
		t.Errorf("a broken connection is %s, want retryable", kind)
	}
	// The host must be able to tell its own deadline from a sink's failure.
	for code, target := range map[codes.Code]error{codes.DeadlineExceeded: context.DeadlineExceeded, codes.Canceled: context.Canceled} {
		err := fromStatus(status.Error(code, target.Error()))
		if kind, _ := attempt.KindOf(err); !errors.Is(err, target) || kind != attempt.KindRetry {
			t.Errorf("%s: %v (%s) does not wrap %v as retryable", code, err, kind, target)
		}
	}
	if fromStatus(nil) != nil {
		t.Error("fromStatus(nil) is not nil")
	}
}

// A version 2 answer's failed events come back with their index, kind,
// pause and text (URLs cut to scheme and host); an answer naming an event
// the batch does not have fails the batch.
func TestResultOf(t *testing.T) {
	resp := &sinkv2.DeliverResponse{Duplicates: 1, Failed: wire.EncodeEventFaults([]wire.EventFault{
		{Index: 2, Fault: wire.Fault{Kind: wire.FaultPermanent, Msg: "record too large for https://user:pw@broker.example/x"}},
		{Index: 0, Fault: wire.Fault{Kind: wire.FaultThrottled, Msg: "quota", RetryAfter: time.Second}},
	})}
	res, err := resultOf(resp, 3)
	if err != nil || res.Duplicates != 1 || len(res.Failed) != 2 {
		t.Fatalf("resultOf = %+v, %v", res, err)
	}
	if f := res.Failed[0]; f.Index != 2 || f.Err.Error() != "record too large for https://broker.example" {
		t.Errorf("first failure: %d %q", f.Index, f.Err)
	}
	if kind, _ := attempt.KindOf(res.Failed[0].Err); kind != attempt.KindPermanent {
		t.Errorf("first failure is %s, want permanent", kind)
	}
	if kind, pause := attempt.KindOf(res.Failed[1].Err); res.Failed[1].Index != 0 || kind != attempt.KindThrottle || pause != time.Second {
		t.Errorf("second failure: %d %s %s", res.Failed[1].Index, kind, pause)
	}
	if _, err := resultOf(resp, 2); err == nil || !strings.Contains(err.Error(), "named event 2 of a batch of 2") {
		t.Errorf("an answer naming event 2 of 2: %v", err)
	} else if kind, _ := attempt.KindOf(err); kind != attempt.KindRetry {
		t.Errorf("an untrustworthy answer is %s, want retryable", kind)
	}
}
