package main

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/walcast/walcast/pluginkit"
)

// TestRedirectIsAFailedAttempt pins what docs/sinks.md states for the grpc
// sink: gRPC has no redirects, and grpc-go follows none. A proxy in front
// of the receiver that answers a 3xx (over HTTP/2, as gRPC speaks it) is a
// failed, retryable attempt whose error names the status; nothing goes to
// the Location, here a real receiver that would answer OK.
func TestRedirectIsAFailedAttempt(t *testing.T) {
	target := startReceiver(t)
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			var hits atomic.Int32
			proxy := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hits.Add(1)
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Location", "http://"+target.addr+r.URL.Path)
				w.WriteHeader(code)
			})}
			proxy.Protocols = new(http.Protocols)
			proxy.Protocols.SetUnencryptedHTTP2(true) // gRPC's prior-knowledge h2c
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go proxy.Serve(l)
			t.Cleanup(func() { proxy.Close() })

			s := openSink(t, map[string]any{"address": l.Addr().String(), "timeout": "10s"})
			_, err = s.Deliver(t.Context(), pluginkit.Batch{Events: batch()})
			if err == nil {
				t.Fatalf("Deliver through a %d answer succeeded", code)
			}
			if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindRetryable {
				t.Errorf("Deliver = %v (%s), want a retryable failed attempt", err, kind)
			}
			if !strings.Contains(err.Error(), strconv.Itoa(code)) || !strings.Contains(err.Error(), "never follows") {
				t.Errorf("error %q does not name the status %d and say that it is not followed", err, code)
			}
			if hits.Load() == 0 {
				t.Error("the call never reached the proxy")
			}
			if n := target.callCount(); n != 0 {
				t.Errorf("the Location got %d calls: the redirect was followed", n)
			}
			if code == http.StatusTemporaryRedirect {
				t.Logf("Deliver through a 307: %v", err)
			}
		})
	}
}
