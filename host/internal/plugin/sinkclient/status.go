package sinkclient

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/status"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/proto/sink/wire"
)

// fromStatus converts the error of a call to a sink plugin into a pluginkit
// error that KindOf classifies and errors.As can unpack into a
// *pluginkit.ConfigError. Its text is the plugin's message, verbatim but
// for URLs, which are cut to scheme and host (redactURLs). It is the host
// side's one conversion from the protocol's faults (pluginkit's server has
// the other direction). A nil err gives nil.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); !ok {
		// Not from the plugin at all (the connection broke): keep the
		// chain, the caller may look into it.
		return pluginkit.Retryable(err)
	}
	f := wire.FaultOf(err)
	f.Msg = redactURLs(f.Msg)
	switch f.Kind {
	case wire.FaultConfig:
		errs := make([]error, len(f.Violations))
		for i, v := range f.Violations {
			errs[i] = &pluginkit.ConfigError{Field: v.Field, Msg: redactURLs(v.Msg), Table: v.Table}
		}
		if len(errs) == 1 {
			return &remoteError{msg: f.Msg, err: errs[0]}
		}
		return &remoteError{msg: f.Msg, err: errors.Join(errs...)}
	case wire.FaultThrottled:
		return &remoteError{msg: f.Msg, err: pluginkit.Throttled(f.RetryAfter, errors.New(f.Msg))}
	case wire.FaultPermanent:
		return &remoteError{msg: f.Msg, err: pluginkit.Permanent(errors.New(f.Msg))}
	case wire.FaultFatal:
		return &remoteError{msg: f.Msg, err: pluginkit.Fatal(errors.New(f.Msg))}
	}
	if f.Context != nil {
		// Wrapped, so the caller can tell its own deadline from a failure.
		return pluginkit.Retryable(fmt.Errorf("%s: %w", f.Msg, f.Context))
	}
	return &remoteError{msg: f.Msg, err: pluginkit.Retryable(errors.New(f.Msg))}
}

// remoteError carries an error's text across the boundary verbatim while
// unwrapping to the classified error rebuilt from the status. Without it a
// throttled error would read "throttled for 5s: throttled for 5s: ..." once
// rebuilt on the host.
type remoteError struct {
	msg string
	err error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.err }
