package main

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/walcast/walcast/pluginkit"
)

// defaultRetryAfter is the pause for a RESOURCE_EXHAUSTED without a
// RetryInfo detail, as the webhook sink pauses for a 429 without
// Retry-After.
const defaultRetryAfter = 30 * time.Second

// classify wraps err, the failure of a Deliver call, with what was being
// done and the pluginkit kind its status code calls for. This is the one
// place that reads the receiver's answer; proto/receiver/v1/receiver.proto
// documents the same table for receiver authors:
//
//   - RESOURCE_EXHAUSTED: throttled for the RetryInfo delay, 30 s without
//     one; but gRPC's own "message larger than max" is permanent, so that
//     the host splits the batch instead of pausing and resending the same
//     oversized request forever.
//   - INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE: permanent; the
//     host isolates the event that fails and parks it.
//   - UNIMPLEMENTED: fatal. The address serves something other than the
//     Receiver service: no event can ever be delivered there, and parking
//     them one by one would empty the stream into walcast.parked; walcast
//     stops and says so instead.
//   - PERMISSION_DENIED is retryable, like UNAUTHENTICATED: a proxy or a
//     receiver refusing the caller is fixed by an operator, and the events
//     must stay queued meanwhile.
//   - Anything else, including errors that carry no status at all (the
//     connection broke) and our own deadline: retryable. A 3xx from
//     something in front of the receiver (UNKNOWN) says so: gRPC follows
//     no redirect, so it is a failed attempt like any other.
func classify(what string, err error) error {
	wrapped := fmt.Errorf("%s: %w", what, err)
	st, _ := status.FromError(err) // no status: Unknown, retryable
	switch st.Code() {
	case codes.ResourceExhausted:
		if d, ok := retryDelay(st); ok {
			return pluginkit.Throttled(d, wrapped)
		}
		if messageTooLarge(st.Message()) {
			return pluginkit.Permanent(fmt.Errorf("%w (raise the receiver's maximum receive message size to %d MiB)", wrapped, maxRequestBytes>>20))
		}
		return pluginkit.Throttled(defaultRetryAfter, wrapped)
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return pluginkit.Permanent(wrapped)
	case codes.Unimplemented:
		return pluginkit.Fatal(fmt.Errorf("%w (is the address a walcast.receiver.v1.Receiver?)", wrapped))
	case codes.Unknown:
		if isRedirect(st.Message()) {
			return pluginkit.Retryable(fmt.Errorf("%w (a proxy or load balancer at the address answers with a redirect, which gRPC never follows: nothing was delivered; set address to the receiver itself)", wrapped))
		}
	}
	return pluginkit.Retryable(wrapped)
}

// redirectStatus is how grpc-go reports an HTTP answer that is not gRPC's
// 200, e.g. "unexpected HTTP status code received from server: 307
// (Temporary Redirect); malformed header: missing HTTP content-type". It
// follows no redirect and does not expose the Location header.
const redirectStatus = "unexpected HTTP status code received from server: 3"

func isRedirect(msg string) bool { return strings.Contains(msg, redirectStatus) }

// retryDelay returns the delay of the status's RetryInfo detail, if it has
// one. A negative delay is no pause.
func retryDelay(st *status.Status) (time.Duration, bool) {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return max(ri.GetRetryDelay().AsDuration(), 0), true
		}
	}
	return 0, false
}

// tooLargeMessages are how gRPC implementations word a message over the
// receiving side's size limit, which they all report as RESOURCE_EXHAUSTED:
// "grpc: received message larger than max (N vs. M)" (Go, C core, so
// Python, C++ and Ruby, and Node), "gRPC message exceeds maximum size M: N"
// (Java), "Received message exceeds the maximum configured message size."
// (.NET). There is no structured way to tell it apart from a throttle.
var tooLargeMessages = []string{"larger than max", "exceeds maximum", "exceeds the maximum"}

// messageTooLarge reports whether a RESOURCE_EXHAUSTED message is gRPC's
// own message size error rather than a receiver asking us to slow down.
func messageTooLarge(msg string) bool {
	msg = strings.ToLower(msg)
	for _, s := range tooLargeMessages {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
