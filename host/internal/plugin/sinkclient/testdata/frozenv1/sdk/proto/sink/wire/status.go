package wire

import (
	"context"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// A sink's errors cross the process boundary as gRPC status values. This
// file is the only place that knows the mapping, so that the plugin side
// (pluginkit's server) and the host side (host/internal/plugin/sinkclient) cannot
// drift apart:
//
//	FaultConfig     ↔ InvalidArgument + BadRequest.FieldViolation{field, description, reason "TABLE:<table>"}
//	                  (one violation per config error)
//	FaultThrottled  ↔ ResourceExhausted + RetryInfo{retry_delay}
//	FaultPermanent  ↔ FailedPrecondition
//	FaultFatal      ↔ Aborted
//	FaultRetryable  ↔ Unavailable
//
// On the host side every other code, and every error that is not a status
// at all, is retryable: a crashed plugin or a broken connection must lead
// to a redelivery, never to a lost batch. Each side converts between Fault
// and its own error types in one function: pluginkit's server from the
// sink's errors, the host's plugin client into them.

// FaultKind is what a failed call asks the host to do.
type FaultKind int

// The fault kinds. They mirror pluginkit's error kinds, plus the config
// error that Configure answers with.
const (
	FaultRetryable FaultKind = iota
	FaultThrottled
	FaultPermanent
	FaultFatal
	FaultConfig
)

// Fault is a failed call as it travels between host and plugin.
type Fault struct {
	Kind FaultKind
	// Msg is the error's text, carried verbatim.
	Msg string
	// RetryAfter is the pause a FaultThrottled asks for.
	RetryAfter time.Duration
	// Violations are the config errors of a FaultConfig, in order.
	Violations []Violation
	// Context is context.DeadlineExceeded or context.Canceled when the call
	// ended because its context did (host side only), so that the host can
	// tell its own deadline from a failure of the sink.
	Context error
}

// Violation is one config error: the attribute (or "" for the block), what
// is wrong with it, and the captured table it is about, if any.
type Violation struct {
	Field, Msg, Table string
}

// tableReason prefixes a FieldViolation's reason that names the table a
// violation is about.
const tableReason = "TABLE:"

// Err returns the gRPC status error that carries f.
func (f Fault) Err() error {
	switch f.Kind {
	case FaultConfig:
		br := &errdetails.BadRequest{}
		for _, v := range f.Violations {
			fv := &errdetails.BadRequest_FieldViolation{Field: v.Field, Description: v.Msg}
			if v.Table != "" {
				fv.Reason = tableReason + v.Table
			}
			br.FieldViolations = append(br.FieldViolations, fv)
		}
		return withDetails(status.New(codes.InvalidArgument, f.Msg), br)
	case FaultThrottled:
		return withDetails(status.New(codes.ResourceExhausted, f.Msg), &errdetails.RetryInfo{RetryDelay: durationpb.New(f.RetryAfter)})
	case FaultPermanent:
		return status.Error(codes.FailedPrecondition, f.Msg)
	case FaultFatal:
		return status.Error(codes.Aborted, f.Msg)
	default:
		return status.Error(codes.Unavailable, f.Msg)
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

// FaultOf reads the error of a call to a plugin. err must not be nil.
//
// A ResourceExhausted status is only a throttle when it carries RetryInfo:
// gRPC itself reports an oversized message with that code, and pausing and
// resending the same batch would loop forever, so without RetryInfo it is
// permanent. An error that is not a
// status, or a code outside the mapping, is retryable with the code in its
// message.
func FaultOf(err error) Fault {
	st, ok := status.FromError(err)
	if !ok {
		return Fault{Kind: FaultRetryable, Msg: err.Error()}
	}
	msg := st.Message()
	switch st.Code() {
	case codes.InvalidArgument:
		for _, d := range st.Details() {
			if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
				f := Fault{Kind: FaultConfig, Msg: msg}
				for _, fv := range br.GetFieldViolations() {
					table, _ := strings.CutPrefix(fv.GetReason(), tableReason)
					f.Violations = append(f.Violations, Violation{Field: fv.GetField(), Msg: fv.GetDescription(), Table: table})
				}
				return f
			}
		}
	case codes.ResourceExhausted:
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				return Fault{Kind: FaultThrottled, Msg: msg, RetryAfter: ri.GetRetryDelay().AsDuration()}
			}
		}
		// gRPC's own "message larger than max" (a plugin built with an
		// older pluginkit and a smaller limit): the same event fails the
		// same way every time, so it is parked at once when alone.
		return Fault{Kind: FaultPermanent, Msg: msg + " (the message is larger than the plugin connection accepts)"}
	case codes.FailedPrecondition:
		return Fault{Kind: FaultPermanent, Msg: msg}
	case codes.Aborted:
		return Fault{Kind: FaultFatal, Msg: msg}
	case codes.DeadlineExceeded:
		return Fault{Kind: FaultRetryable, Msg: msg, Context: context.DeadlineExceeded}
	case codes.Canceled:
		return Fault{Kind: FaultRetryable, Msg: msg, Context: context.Canceled}
	case codes.Unavailable:
		return Fault{Kind: FaultRetryable, Msg: msg}
	}
	return Fault{Kind: FaultRetryable, Msg: st.Code().String() + ": " + msg}
}
