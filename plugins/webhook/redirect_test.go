package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/walcast/walcast/pluginkit"
)

// landing is the server a redirect points at: it answers 200 to anything
// and records what reached it, which must be nothing.
type landing struct {
	mu   sync.Mutex
	reqs []string // "METHOD path bytes-of-body auth-header"
}

func (l *landing) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	l.mu.Lock()
	l.reqs = append(l.reqs, fmt.Sprintf("%s %s %d bytes, Authorization %q, Webhook-Signature %q",
		r.Method, r.URL.Path, len(body), r.Header.Get("Authorization"), r.Header.Get("Webhook-Signature")))
	l.mu.Unlock()
}

func (l *landing) requests() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.reqs...)
}

// serve runs h on 127.0.0.1 until the test ends and returns its base URL.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "http://" + l.Addr().String()
}

// TestRedirectIsAFailedAttempt: a receiver answering any 3xx has not taken
// the batch. Go's client would follow 301/302/303 as a body-less GET (and
// take that GET's 200 as delivered) and 307/308 by re-sending the body,
// the signature and the configured headers to whatever host Location
// names. The sink follows none of them: the attempt fails (retryable),
// the error names the status and the Location (as scheme and host only:
// a Location can carry a token as well), and nothing reaches the Location.
func TestRedirectIsAFailedAttempt(t *testing.T) {
	codes := []int{
		http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect,
		http.StatusMultipleChoices, http.StatusNotModified,
	}
	for _, code := range codes {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			land := &landing{}
			landURL := serve(t, land)
			hook := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				if code != http.StatusNotModified {
					w.Header().Set("Location", landURL+"/landing/loc-path-secret?token=loc-query-secret")
				}
				w.WriteHeader(code)
			}))
			s := newSink(discardLogger())
			cfg, _ := json.Marshal(map[string]any{
				"url":     hook + "/hooks",
				"headers": map[string]string{"Authorization": "Bearer api-key-secret"},
				"secret":  "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
			})
			if err := s.Configure(t.Context(), pluginkit.Setup{Config: cfg}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Open(t.Context()); err != nil {
				t.Fatal(err)
			}
			defer s.Close(t.Context())
			_, err := s.Deliver(t.Context(), pluginkit.Batch{Events: []pluginkit.Event{{ID: pluginkit.MustParseEventID("0/16B3748:0"), Payload: []byte(`{"id":"0/16B3748:0"}`)}}})
			if err == nil {
				t.Fatalf("Deliver answered %d = delivered; the landing server got %q", code, land.requests())
			}
			if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindRetryable {
				t.Errorf("Deliver answered %d = %v (%s), want a retryable failed attempt", code, err, kind)
			}
			msg := err.Error()
			if !strings.Contains(msg, strconv.Itoa(code)+" "+http.StatusText(code)) {
				t.Errorf("error %q does not name the status %d", msg, code)
			}
			if code != http.StatusNotModified && !strings.Contains(msg, "Location "+landURL) {
				t.Errorf("error %q does not name the Location %s", msg, landURL)
			}
			if strings.Contains(msg, "secret") {
				t.Errorf("error %q shows a path or query", msg)
			}
			if got := land.requests(); len(got) > 0 {
				t.Errorf("the redirect was followed: the landing server got %q", got)
			}
		})
	}
}

// TestRedirectErrorAsDocumented keeps the example error in docs/sinks.md
// what the sink says.
func TestRedirectErrorAsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/sinks.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented string
	for _, l := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(l, "POST https://old.example: 308") {
			documented = l
		}
	}
	if documented == "" {
		t.Fatal("docs/sinks.md has no example redirect error")
	}
	target, _ := url.Parse("https://old.example/hooks/orders?token=x")
	resp := &http.Response{StatusCode: 308, Status: "308 Permanent Redirect", Header: http.Header{"Location": {"https://new.example/hooks/orders?token=x"}}}
	if got := redirectError(target, resp).Error(); got != documented {
		t.Errorf("the sink says\n%s\ndocs/sinks.md says\n%s", got, documented)
	}
}
