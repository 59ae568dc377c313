package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// sdkAttempts is how often the SDK tries one request before the error
// reaches the host: a dropped connection or a 500 is usually gone a moment
// later, and the host's own retry waits retry_base (30 s by default). A
// throttle is never retried inside the SDK (see noThrottleRetry): the host
// pauses the whole sink for it instead.
const sdkAttempts = 3

// newClient builds the S3 client from the settings and the SDK's standard
// sources: static credentials when configured, else the SDK's chain
// (environment, shared config and credentials files with profile, web
// identity, container and EC2 instance roles), resolved lazily at the
// first request. It reads local config files only and contacts nothing.
//
// It returns the transport too, whose idle connections Close closes.
func newClient(ctx context.Context, st settings) (*s3.Client, *http.Transport, error) {
	opts := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithHTTPClient(httpClient(st)),
		awsconfig.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = sdkAttempts
				// The SDK's retry token bucket fails requests on its own
				// ("retry quota exceeded") after a burst of errors; the
				// host's backoff is the bound on retries here.
				o.RateLimiter = ratelimit.None
				o.Retryables = append([]retry.IsErrorRetryable{retry.IsErrorRetryableFunc(noThrottleRetry)}, o.Retryables...)
			})
		}),
	}
	if st.region != "" {
		opts = append(opts, awsconfig.WithRegion(st.region))
	}
	if st.profile != "" {
		opts = append(opts, awsconfig.WithSharedConfigProfile(st.profile))
	}
	if st.accessKey != "" {
		opts = append(opts, awsconfig.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(st.accessKey, st.secretKey, st.token)))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		// S3-compatible stores mostly ignore the region but the signature
		// needs one; AWS's global default.
		cfg.Region = "us-east-1"
	}
	// The transport as the SDK's sources left it (a CA bundle added), in
	// a client of our own so that Close can close its idle connections.
	tr := cfg.HTTPClient.(*awshttp.BuildableClient).GetTransport()
	cfg.HTTPClient = &http.Client{
		Transport: tr,
		// S3 redirects (a bucket in another region) are errors to report,
		// as the SDK's own client treats them.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if st.endpoint != "" {
			o.BaseEndpoint = aws.String(st.endpoint)
		}
		o.UsePathStyle = st.pathStyle
		// Checksums only where S3 requires them: several S3-compatible
		// stores refuse the CRC trailers the SDK sends by default. A
		// payload is still signed with its SHA-256 (over plain http) or
		// protected by TLS.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	return client, tr, nil
}

// noThrottleRetry keeps the SDK from retrying a throttle (503 SlowDown and
// its kin): the host pauses the sink for it, within throttle_min and
// throttle_max, without counting an attempt.
func noThrottleRetry(err error) aws.Ternary {
	if _, ok := throttleOf(err); ok {
		return aws.FalseTernary
	}
	return aws.UnknownTernary
}

// httpClient is the SDK's HTTP client with the configured TLS. It is the
// SDK's own buildable client, so that a CA bundle from the SDK's sources
// (AWS_CA_BUNDLE, ca_bundle in the shared config) is added to it.
func httpClient(st settings) *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		tr.MaxIdleConnsPerHost = 32 // objects of a batch go up in parallel
		tr.ResponseHeaderTimeout = 2 * time.Minute
		if st.tls != nil {
			tr.TLSClientConfig = st.tls.Clone()
		}
	})
}
