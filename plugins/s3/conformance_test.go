package main

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/pluginkit/sinktest"
)

// testConfig is a config block for the fake server, with more attributes
// from extra.
func testConfig(t testing.TB, f *fakeS3, extra map[string]any) json.RawMessage {
	t.Helper()
	m := map[string]any{
		"bucket":            f.bucket,
		"prefix":            "cdc",
		"endpoint":          f.URL,
		"path_style":        true,
		"region":            "us-east-1",
		"access_key_id":     "walcast",
		"secret_access_key": "walcast-secret",
	}
	for k, v := range extra {
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConformance runs pluginkit/sinktest against the sink writing JSON
// lines to gofakes3 on 127.0.0.1: what arrived is read back from the
// server's store in the order the objects were written.
func TestConformance(t *testing.T) {
	f := startFakeS3(t)
	fault := func(status int, code string) func() func() {
		return func() func() { return f.failWith(status, code) }
	}
	invalid := func(name, field string, extra map[string]any) sinktest.InvalidConfig {
		return sinktest.InvalidConfig{Name: name, Config: testConfig(t, f, extra), Field: field}
	}
	sinktest.Run(t, sinktest.Config{
		NewBatch: func() pluginkit.BatchSink { return batchCounter{newSink(discardLogger()), f} },
		Config:   testConfig(t, f, nil),
		InvalidConfigs: []sinktest.InvalidConfig{
			invalid("bucket as a URL", "bucket", map[string]any{"bucket": "s3://lake/x"}),
			invalid("endpoint without scheme", "endpoint", map[string]any{"endpoint": "localhost:9000"}),
			invalid("unknown format", "format", map[string]any{"format": "csv"}),
			invalid("compressed parquet", "compression", map[string]any{"format": "parquet", "compression": "gzip"}),
			invalid("tiny part size", "part_size", map[string]any{"part_size": 1024}),
			invalid("threshold below part size", "multipart_threshold", map[string]any{"multipart_threshold": 6 << 20, "part_size": 8 << 20}),
			invalid("key without secret", "access_key_id", map[string]any{"secret_access_key": ""}),
			invalid("unknown tls key", "tls", map[string]any{"tls": map[string]string{"ca": "x"}}),
		},
		Received: f.received,
		Hang:     f.hang,
		Faults: []sinktest.Fault{
			{Name: "503 SlowDown", Inject: fault(http.StatusServiceUnavailable, "SlowDown"), Want: pluginkit.KindThrottled, RetryAfter: defaultThrottle},
			{Name: "500 InternalError", Inject: fault(http.StatusInternalServerError, "InternalError"), Want: pluginkit.KindRetryable},
			{Name: "404 NoSuchBucket", Inject: fault(http.StatusNotFound, "NoSuchBucket"), Want: pluginkit.KindFatal},
			{Name: "403 AccessDenied", Inject: fault(http.StatusForbidden, "AccessDenied"), Want: pluginkit.KindFatal},
			{Name: "403 InvalidAccessKeyId", Inject: fault(http.StatusForbidden, "InvalidAccessKeyId"), Want: pluginkit.KindFatal},
			{Name: "connection dropped mid-upload", Inject: f.dropUploads, Want: pluginkit.KindRetryable},
		},
	})
}
