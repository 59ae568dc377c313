package main

import (
	"encoding/json"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/pluginkit/sinktest"
)

// TestConformance runs pluginkit/sinktest against the sink calling an
// in-process receiver over mutual TLS with a bearer token: the receiver
// records every batch it acknowledged and can be made to hang or to fail
// with any status.
func TestConformance(t *testing.T) {
	p := newPKI(t)
	rcv := startReceiver(t, p.serverTLS(true))
	rcv.token = "conformance"

	cfg := mustJSON(t, map[string]any{
		"address":     rcv.addr,
		"tls":         true,
		"ca_file":     p.caFile,
		"cert_file":   p.clientCertFile,
		"key_file":    p.clientKeyFile,
		"server_name": serverName,
		"token":       "conformance",
		"timeout":     "10s",
	})
	fail := func(st *status.Status) func() (restore func()) {
		return func() func() { return rcv.failWith(st.Err()) }
	}
	sinktest.Run(t, sinktest.Config{
		NewBatch: func() pluginkit.BatchSink { return newSink(discardLogger()) },
		Config:   cfg,
		InvalidConfigs: []sinktest.InvalidConfig{
			{Name: "address without port", Config: json.RawMessage(`{"address":"localhost"}`), Field: "address"},
			{Name: "token without tls", Config: json.RawMessage(`{"address":"localhost:50051","token":"t"}`), Field: "token"},
			{Name: "cert without key", Config: mustJSON(t, map[string]any{"address": "localhost:50051", "tls": true, "cert_file": p.clientCertFile}), Field: "key_file"},
			{Name: "missing ca_file", Config: json.RawMessage(`{"address":"localhost:50051","tls":true,"ca_file":"/nonexistent/ca.pem"}`), Field: "ca_file"},
			{Name: "negative timeout", Config: json.RawMessage(`{"address":"localhost:50051","timeout":"-1s"}`), Field: "timeout"},
		},
		Received: rcv.received,
		Hang:     rcv.hang,
		Faults: []sinktest.Fault{
			{Name: "UNAVAILABLE", Inject: fail(status.New(codes.Unavailable, "receiver restarting")), Want: pluginkit.KindRetryable},
			{Name: "RESOURCE_EXHAUSTED with RetryInfo", Inject: fail(withRetryInfo(t, 3*time.Second)), Want: pluginkit.KindThrottled, RetryAfter: 3 * time.Second},
			{Name: "RESOURCE_EXHAUSTED without RetryInfo", Inject: fail(status.New(codes.ResourceExhausted, "slow down")), Want: pluginkit.KindThrottled, RetryAfter: defaultRetryAfter},
			{Name: "INVALID_ARGUMENT", Inject: fail(status.New(codes.InvalidArgument, "unknown table")), Want: pluginkit.KindPermanent},
			{Name: "UNAUTHENTICATED", Inject: fail(status.New(codes.Unauthenticated, "token expired")), Want: pluginkit.KindRetryable},
		},
	})
}

// withRetryInfo is RESOURCE_EXHAUSTED asking for a pause of d, the way
// receiver.proto tells receivers to throttle.
func withRetryInfo(t testing.TB, d time.Duration) *status.Status {
	t.Helper()
	st, err := status.New(codes.ResourceExhausted, "slow down").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
	if err != nil {
		t.Fatal(err)
	}
	return st
}
