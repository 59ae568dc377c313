package pluginkit

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// A sink's errors cross the process boundary as gRPC status values. This
// file is the only place that knows the mapping, so that the plugin side
// (pluginkit's server adapter) and the host side (host/sinkclient) cannot
// drift apart:
//
//	*ConfigError  ↔ InvalidArgument + BadRequest.FieldViolation{field, description}
//	throttled     ↔ ResourceExhausted + RetryInfo{retry_delay}
//	permanent     ↔ FailedPrecondition
//	retryable     ↔ Unavailable
//
// On the host side every other code, and every error that is not a status
// at all, is retryable: a crashed plugin or a broken connection must lead
// to a redelivery, never to a lost batch.

// StatusFromError converts an error returned by a Sink into the gRPC status
// error a plugin sends to the host. It classifies err by its pluginkit kind
// only; a gRPC status the sink itself received from a downstream service is
// not passed through, so that a downstream InvalidArgument cannot be
// mistaken for a config error. A nil err gives nil.
func StatusFromError(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()

	var ce *ConfigError
	if errors.As(err, &ce) {
		st := status.New(codes.InvalidArgument, msg)
		return withDetails(st, &errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{
				Field:       ce.Field,
				Description: ce.Msg,
			}},
		})
	}

	switch kind, after := KindOf(err); kind {
	case KindThrottled:
		st := status.New(codes.ResourceExhausted, msg)
		return withDetails(st, &errdetails.RetryInfo{RetryDelay: durationpb.New(after)})
	case KindPermanent:
		return status.Error(codes.FailedPrecondition, msg)
	case KindFatal:
		return status.Error(codes.Aborted, msg)
	default:
		return status.Error(codes.Unavailable, msg)
	}
}

// withDetails attaches a detail message to st. Attaching only fails when the
// detail cannot be marshalled, which would be a bug here; the status then
// goes out without it and the host degrades to a retryable error.
func withDetails(st *status.Status, detail protoadapt.MessageV1) error {
	if d, err := st.WithDetails(detail); err == nil {
		return d.Err()
	}
	return st.Err()
}

// ErrorFromStatus converts the error of a call to a sink plugin back into a
// pluginkit error that KindOf classifies and errors.As can unpack into a
// *ConfigError. The returned error's text is the plugin's message. A nil err
// gives nil.
//
// A ResourceExhausted status is only a throttle when it carries RetryInfo:
// gRPC itself reports an oversized message with that code (a plugin built
// with an older pluginkit and a smaller limit), and pausing or retrying the
// same event would loop forever, so without RetryInfo it is permanent: the
// event is parked on its first failure when it is alone. DeadlineExceeded and Canceled
// wrap context.DeadlineExceeded and context.Canceled, so the caller can tell
// its own deadline apart from a failure of the sink.
func ErrorFromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return Retryable(err)
	}
	msg := st.Message()

	switch st.Code() {
	case codes.InvalidArgument:
		for _, d := range st.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
				fv := br.GetFieldViolations()[0]
				return &remoteError{msg: msg, err: &ConfigError{Field: fv.GetField(), Msg: fv.GetDescription()}}
			}
		}
	case codes.ResourceExhausted:
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				after := ri.GetRetryDelay().AsDuration()
				return &remoteError{msg: msg, err: Throttled(after, errors.New(msg))}
			}
		}
		return &remoteError{msg: msg, err: Permanent(fmt.Errorf("%s (the message is larger than the plugin connection accepts)", msg))}
	case codes.FailedPrecondition:
		return &remoteError{msg: msg, err: Permanent(errors.New(msg))}
	case codes.Aborted:
		return &remoteError{msg: msg, err: Fatal(errors.New(msg))}
	case codes.DeadlineExceeded:
		return Retryable(fmt.Errorf("%s: %w", msg, context.DeadlineExceeded))
	case codes.Canceled:
		return Retryable(fmt.Errorf("%s: %w", msg, context.Canceled))
	case codes.Unavailable:
		return &remoteError{msg: msg, err: Retryable(errors.New(msg))}
	}
	return Retryable(fmt.Errorf("%s: %s", st.Code(), msg))
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
