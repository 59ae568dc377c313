package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/walcast/walcast/pluginkit"
)

// syncBuffer is a log destination the handlers of several goroutines can
// share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// secretParts are the parts of a hook URL that hold credentials: the
// user:password, a Slack-style path and a token in the query.
var secretParts = []string{"hookuser", "hookpass", "T0SECRET", "B0SECRET", "pathtoken", "querytoken"}

// secretURL is base (scheme://host:port) with every credential-bearing
// part filled in.
func secretURL(base string) string {
	return strings.Replace(base, "://", "://hookuser:hookpass@", 1) + "/services/T0SECRET/B0SECRET/pathtoken?token=querytoken"
}

func assertNoSecret(t *testing.T, what, text string) {
	t.Helper()
	for _, p := range secretParts {
		if strings.Contains(text, p) {
			t.Errorf("%s shows %q: %s", what, p, text)
		}
	}
}

// TestURLSecretsNeverShown: whatever goes wrong, the sink's errors and
// logs show the URL as scheme and host only, never the user:password,
// the path or the query. Go's *url.Error repeats the whole URL, so a
// network error, a timeout and an unparseable URL are covered as well as
// the statuses the sink reports itself.
func TestURLSecretsNeverShown(t *testing.T) {
	var logs syncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	statusOf := map[string]int{"/500": 500, "/410": 410, "/429": 429, "/302": 302, "/413": 413}
	var mode sync.Map // path prefix chosen per case
	hook := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		c, _ := mode.Load("case")
		switch c {
		case "hang":
			<-r.Context().Done()
			return
		case "/302":
			w.Header().Set("Location", "/services/T0SECRET/B0SECRET/pathtoken/?token=querytoken")
		}
		w.WriteHeader(statusOf[c.(string)])
	}))
	closed := func() string { // a port nothing listens on
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return "http://" + l.Addr().String()
	}()

	ev := []pluginkit.Event{{ID: pluginkit.MustParseEventID("0/16B3748:0"), Payload: []byte(`{"id":"0/16B3748:0"}`)}}
	deliver := func(t *testing.T, base, c string, timeout string) error {
		mode.Store("case", c)
		s := newSink(log)
		cfg, _ := json.Marshal(map[string]any{"url": secretURL(base), "timeout": timeout})
		if err := s.Configure(t.Context(), pluginkit.Setup{Config: cfg}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Open(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer s.Close(t.Context())
		_, err := s.Deliver(t.Context(), pluginkit.Batch{Events: ev})
		if err == nil {
			t.Fatalf("case %s: Deliver succeeded", c)
		}
		if !strings.Contains(err.Error(), base) {
			t.Errorf("case %s: error %q does not name the receiver %s", c, err, base)
		}
		return err
	}
	for _, c := range []string{"/500", "/410", "/429", "/302", "/413"} {
		t.Run("status"+c, func(t *testing.T) { assertNoSecret(t, "error", deliver(t, hook, c, "10s").Error()) })
	}
	t.Run("connection refused", func(t *testing.T) {
		assertNoSecret(t, "error", deliver(t, closed, "", "10s").Error())
	})
	t.Run("timeout", func(t *testing.T) {
		err := deliver(t, hook, "hang", "200ms")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("a hanging receiver gave %v, want a timeout", err)
		}
		assertNoSecret(t, "error", err.Error())
	})
	t.Run("unparseable url", func(t *testing.T) {
		err := newSink(log).Configure(t.Context(), pluginkit.Setup{Config: json.RawMessage(`{"url":"https://hookuser:hookpass@example.com/services/T0SECRET/B0SECRET/pathtoken%zz?token=querytoken"}`)})
		var ce *pluginkit.ConfigError
		if !errors.As(err, &ce) || ce.Field != "url" {
			t.Fatalf("Configure = %v, want a ConfigError for url", err)
		}
		assertNoSecret(t, "config error", err.Error())
	})
	if !strings.Contains(logs.String(), "webhook configured") {
		t.Fatalf("no configure log line in:\n%s", logs.String())
	}
	assertNoSecret(t, "log", logs.String())
}
