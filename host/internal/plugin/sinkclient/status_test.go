package sinkclient

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/walcast/walcast/pluginkit"
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

// Every fault a plugin can send comes back as the pluginkit error of the
// same kind, with the plugin's text verbatim.
func TestFromStatus(t *testing.T) {
	tests := []struct {
		fault     wire.Fault
		kind      pluginkit.Kind
		after     time.Duration
		wantField string
		target    error
	}{
		{fault: wire.Fault{Kind: wire.FaultRetryable, Msg: "503"}, kind: pluginkit.KindRetryable},
		{fault: wire.Fault{Kind: wire.FaultPermanent, Msg: "413"}, kind: pluginkit.KindPermanent},
		{fault: wire.Fault{Kind: wire.FaultFatal, Msg: "fenced"}, kind: pluginkit.KindFatal},
		{fault: wire.Fault{Kind: wire.FaultThrottled, Msg: "throttled for 7s: 429", RetryAfter: 7 * time.Second}, kind: pluginkit.KindThrottled, after: 7 * time.Second},
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
		if kind, after := pluginkit.KindOf(got); kind != tt.kind || after != tt.after {
			t.Errorf("%+v: KindOf = %s, %s", tt.fault, kind, after)
		}
	}
}

func TestFromStatusKeepsCauses(t *testing.T) {
	if err := fromStatus(io.EOF); !errors.Is(err, io.EOF) {
		t.Errorf("a broken connection lost its cause: %v", err)
	}
	if kind, _ := pluginkit.KindOf(fromStatus(io.EOF)); kind != pluginkit.KindRetryable {
		t.Errorf("a broken connection is %s, want retryable", kind)
	}
	// The host must be able to tell its own deadline from a sink's failure.
	for code, target := range map[codes.Code]error{codes.DeadlineExceeded: context.DeadlineExceeded, codes.Canceled: context.Canceled} {
		err := fromStatus(status.Error(code, target.Error()))
		if kind, _ := pluginkit.KindOf(err); !errors.Is(err, target) || kind != pluginkit.KindRetryable {
			t.Errorf("%s: %v (%s) does not wrap %v as retryable", code, err, kind, target)
		}
	}
	if fromStatus(nil) != nil {
		t.Error("fromStatus(nil) is not nil")
	}
}
