package sinkclient

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/status"

	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/pluginkit"
	sinkv2 "github.com/walcast/walcast/proto/sink/v2"
	"github.com/walcast/walcast/proto/sink/wire"
)

// The host side's one conversion of each kind of answer from the wire
// (pluginkit's server has the other direction): fromStatus for a failed
// call, resultOf for a version 2 Deliver's answer. What they return is the
// host's own vocabulary: attempt's kinds for a delivery's failures, a
// *pluginkit.ConfigError for a config Configure refused. Texts are the
// plugin's, verbatim but for URLs, which are cut to scheme and host
// (redactURLs).

// fromStatus converts the error of a call to a sink plugin. A config
// fault unpacks with errors.As into *pluginkit.ConfigError (errors.Join
// of several); every other fault is classified for attempt.KindOf. A nil
// err gives nil.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); !ok {
		// Not from the plugin at all (the connection broke): keep the
		// chain, the caller may look into it.
		return attempt.Retryable(err)
	}
	f := wire.FaultOf(err)
	f.Msg = redactURLs(f.Msg)
	if f.Kind == wire.FaultConfig {
		errs := make([]error, len(f.Violations))
		for i, v := range f.Violations {
			errs[i] = &pluginkit.ConfigError{Field: v.Field, Msg: redactURLs(v.Msg), Table: v.Table}
		}
		if len(errs) == 1 {
			return &remoteError{msg: f.Msg, err: errs[0]}
		}
		return &remoteError{msg: f.Msg, err: errors.Join(errs...)}
	}
	if f.Kind == wire.FaultRetryable && f.Context != nil {
		// Wrapped, so the caller can tell its own deadline from a failure.
		return attempt.Retryable(fmt.Errorf("%s: %w", f.Msg, f.Context))
	}
	return &remoteError{msg: f.Msg, err: faultError(f)}
}

// faultError is the classified error a delivery fault stands for.
func faultError(f wire.Fault) error {
	err := errors.New(f.Msg)
	switch f.Kind {
	case wire.FaultThrottled:
		return attempt.Throttled(f.RetryAfter, err)
	case wire.FaultPermanent:
		return attempt.Permanent(err)
	case wire.FaultFatal:
		return attempt.Fatal(err)
	}
	return attempt.Retryable(err)
}

// resultOf reads a version 2 Deliver's answer to a batch of n events. An
// answer naming events the batch does not have is a retryable failure of
// the batch.
func resultOf(resp *sinkv2.DeliverResponse, n int) (attempt.Result, error) {
	res := attempt.Result{Duplicates: int(resp.GetDuplicates())}
	faults, err := wire.DecodeEventFaults(resp.GetFailed(), n)
	if err != nil {
		return attempt.Result{}, attempt.Retryable(fmt.Errorf("deliver: %w", err))
	}
	for _, f := range faults {
		f.Msg = redactURLs(f.Msg)
		res.Failed = append(res.Failed, attempt.Failure{Index: f.Index, Err: &remoteError{msg: f.Msg, err: faultError(f.Fault)}})
	}
	return res, nil
}

// remoteError carries an error's text across the boundary verbatim while
// unwrapping to the classified error rebuilt from the status. Without it a
// rebuilt error could read differently from what the plugin said.
type remoteError struct {
	msg string
	err error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.err }
