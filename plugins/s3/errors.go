package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/walcast/walcast/pluginkit"
)

// defaultThrottle is the pause asked for when a throttled answer says
// nothing (S3 sends no Retry-After with SlowDown). The host doubles it for
// each throttle in a row, within throttle_min and throttle_max: the
// exponential backoff S3 asks for.
const defaultThrottle = time.Second

// Error codes, as S3 and S3-compatible stores answer them.
var (
	// throttleCodes ask the client to slow down.
	throttleCodes = map[string]bool{
		"SlowDown": true, "Throttling": true, "ThrottlingException": true, "RequestLimitExceeded": true,
		"TooManyRequests": true, "TooManyRequestsException": true, "RequestThrottled": true, "BandwidthLimitExceeded": true,
	}
	// deniedCodes refuse who we are or what we may do: the same answer
	// for every object, until someone changes credentials or policies.
	deniedCodes = map[string]bool{
		"AccessDenied": true, "InvalidAccessKeyId": true, "SignatureDoesNotMatch": true,
		"AllAccessDisabled": true, "AccountProblem": true, "InvalidToken": true,
	}
	// refusedCodes refuse one object: retrying it cannot help.
	refusedCodes = map[string]bool{
		"EntityTooLarge": true, "KeyTooLongError": true, "InvalidArgument": true, "MetadataTooLarge": true,
	}
)

// classify turns an S3 error into a pluginkit error whose message says
// what was being done, what went wrong and what to do.
//
//   - A missing bucket, and credentials or policies that refuse us, are
//     fatal: every object would fail the same way, so parking would park
//     the whole stream and retrying would only park it later. The
//     pipeline stops with the cause; the changes wait in the replication
//     slot until it is fixed and walcast restarted.
//   - 503 SlowDown and the other throttles pause the sink (Throttled).
//   - An object S3 refuses on its own (too large, a key too long) is
//     permanent: its events are parked.
//   - Anything else (a dropped connection mid-upload, a 500, a timeout,
//     expired temporary credentials) is retryable.
func (s *Sink) classify(what string, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*pluginkit.Error](err); ok {
		return err
	}
	where := s.where()
	code := errorCode(err)
	if d, ok := throttleOf(err); ok {
		return pluginkit.Throttled(d, fmt.Errorf("%s: %s throttles requests (%s): %w", what, where, cmp.Or(code, "HTTP 503"), err))
	}
	switch {
	case code == "NoSuchBucket":
		return pluginkit.Fatal(fmt.Errorf("%s: bucket %q does not exist at %s (NoSuchBucket): create it or set bucket to an existing one; walcast stops instead of parking every change, which wait in the replication slot: %w",
			what, s.cfg.bucket, where, err))
	case deniedCodes[code]:
		return pluginkit.Fatal(fmt.Errorf("%s: %s refuses the credentials (%s): check access_key_id and secret_access_key (or the SDK's sources: environment passed with the sink's env, profile, instance role) and grant s3:PutObject and s3:GetObject on %s/%s*, and s3:ListBucket on the bucket; walcast stops instead of parking every change, which wait in the replication slot: %w",
			what, where, code, s.cfg.bucket, s.cfg.prefix, err))
	case refusedCodes[code]:
		return pluginkit.Permanent(fmt.Errorf("%s: %s refuses the object (%s): %w", what, where, code, err))
	case code == "ExpiredToken" || code == "RequestTimeTooSkewed":
		return pluginkit.Retryable(fmt.Errorf("%s: %s: %s (temporary credentials are refreshed, and a clock off by more than 15 minutes must be fixed): %w", what, where, code, err))
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return pluginkit.Retryable(fmt.Errorf("%s: no answer in time from %s: %w", what, where, err))
	}
	return pluginkit.Retryable(fmt.Errorf("%s at %s: %w", what, where, err))
}

// where names the destination for messages: the endpoint or AWS's region.
func (s *Sink) where() string {
	if s.cfg.endpoint != "" {
		return s.cfg.endpoint
	}
	return "AWS S3 in " + s.region
}

// errorCode is the S3 error code of err ("NoSuchBucket"), if any.
func errorCode(err error) string {
	if ae, ok := errors.AsType[smithy.APIError](err); ok {
		return ae.ErrorCode()
	}
	return ""
}

// httpStatus is the HTTP status of the answer that failed err, or 0.
func httpStatus(err error) (int, http.Header) {
	if re, ok := errors.AsType[*awshttp.ResponseError](err); ok && re.Response != nil {
		return re.Response.StatusCode, re.Response.Header
	}
	return 0, nil
}

// throttleOf reports whether err is a throttle and how long it asks to
// wait: an S3 throttling code, 429, or 503 (S3's SlowDown, or "Service
// Unavailable: reduce your request rate").
func throttleOf(err error) (time.Duration, bool) {
	status, header := httpStatus(err)
	if !throttleCodes[errorCode(err)] && status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable {
		return 0, false
	}
	if s := header.Get("Retry-After"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 {
			return time.Duration(n) * time.Second, true
		}
		if t, err := http.ParseTime(s); err == nil {
			return time.Until(t), true
		}
	}
	return defaultThrottle, true
}
