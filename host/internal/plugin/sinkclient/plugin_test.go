package sinkclient

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/pluginkit"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// request is what the test receiver saw.
type request struct {
	header http.Header
	body   []byte
}

// receiver is an httptest server on 127.0.0.1 that hands every request to
// the test and answers with respond.
func receiver(t *testing.T, respond func(w http.ResponseWriter, r *http.Request)) (*httptest.Server, <-chan request) {
	t.Helper()
	reqs := make(chan request, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		reqs <- request{header: r.Header.Clone(), body: body}
		respond(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, reqs
}

func events(ids ...string) []pluginkit.Event {
	var out []pluginkit.Event
	for _, id := range ids {
		out = append(out, pluginkit.Event{
			ID:      pluginkit.MustParseEventID(id),
			Schema:  "public",
			Table:   "orders",
			Op:      pluginkit.OpInsert,
			Key:     []byte(`{"id":1}`),
			Payload: []byte(`{"id":"` + id + `","op":"insert","after":{"id":1}}`),
		})
	}
	return out
}

// launch starts the named plugin, configures and opens it.
func launch(t testing.TB, sinkType string, cfg Config, config any) *Plugin {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cfg.Path = pluginPath(t, sinkType)
	p, err := Launch(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	raw, _ := json.Marshal(config)
	if err := p.Configure(ctx, raw); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	if _, err := p.Open(ctx); err != nil {
		t.Fatalf("Open: %v", err)
	}
	return p
}

func TestWebhookDeliversSignedBatch(t *testing.T) {
	t.Parallel()
	srv, reqs := receiver(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	logs := newRecorder()
	p := launch(t, "webhook", Config{SinkID: "orders-hook", Logger: slog.New(logs)}, map[string]any{
		"url":     srv.URL + "/hook",
		"secret":  testSecret,
		"headers": map[string]string{"Authorization": "Bearer t0ken"},
	})

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	info, err := p.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "webhook" || len(info.Config) == 0 || info.Config[0].Name != "url" || !info.Config[0].Required {
		t.Errorf("Info = %+v", info)
	}

	batch := events("0/16B3748:0", "0/16B3748:1", "0/16B3900:0")
	res, err := p.Deliver(ctx, attempt.Batch{Events: batch})
	if err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	if res.Duplicates != 0 {
		t.Errorf("Duplicates = %d", res.Duplicates)
	}

	req := <-reqs
	want := `{"events":[` + string(batch[0].Payload) + "," + string(batch[1].Payload) + "," + string(batch[2].Payload) + `]}`
	if string(req.body) != want {
		t.Errorf("body =\n%s\nwant\n%s", req.body, want)
	}
	h := req.header
	if got := h.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q", got)
	}
	if got := h.Get("Authorization"); got != "Bearer t0ken" {
		t.Errorf("Authorization = %q", got)
	}
	id := h.Get("webhook-id")
	if id != webhookID(batch) || h.Get("Idempotency-Key") != id {
		t.Errorf("webhook-id = %q, Idempotency-Key = %q", id, h.Get("Idempotency-Key"))
	}
	ts := h.Get("webhook-timestamp")
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(testSecret, "whsec_"))
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + string(req.body)))
	if got, want := h.Get("webhook-signature"), "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)); got != want {
		t.Errorf("webhook-signature = %q, want %q", got, want)
	}

	// The plugin logs through pluginkit.NewLogger; go-plugin parses the
	// lines and the host re-emits them tagged with the sink id.
	var rec record
	waitFor(t, 10*time.Second, "the plugin's log line", func() (ok bool) {
		rec, ok = logs.find("webhook configured")
		return ok
	})
	if rec.attrs["sink"] != "orders-hook" || rec.level != slog.LevelInfo || !strings.HasPrefix(rec.attrs["url"].(string), srv.URL) {
		t.Errorf("log record = %+v", rec)
	}
	if _, ok := rec.attrs["@module"]; ok {
		t.Errorf("log record keeps @module: %+v", rec.attrs)
	}

	if err := p.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func TestWebhookThrottled(t *testing.T) {
	t.Parallel()
	srv, _ := receiver(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	p := launch(t, "webhook", Config{SinkID: "t"}, map[string]any{"url": srv.URL})
	_, err := p.Deliver(t.Context(), attempt.Batch{Events: events("0/1:0")})
	kind, after := attempt.KindOf(err)
	if kind != attempt.KindThrottle || after != 7*time.Second {
		t.Fatalf("Deliver = %v (kind %s, after %s), want throttled for 7s", err, kind, after)
	}
}

func TestWebhookServerErrorIsRetryable(t *testing.T) {
	t.Parallel()
	srv, _ := receiver(t, func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "database is down", http.StatusInternalServerError)
	})
	p := launch(t, "webhook", Config{SinkID: "t"}, map[string]any{"url": srv.URL})
	_, err := p.Deliver(t.Context(), attempt.Batch{Events: events("0/1:0")})
	if err == nil {
		t.Fatal("Deliver succeeded against a 500")
	}
	if kind, _ := attempt.KindOf(err); kind != attempt.KindRetry {
		t.Errorf("kind = %s, want retryable", kind)
	}
	if msg := err.Error(); !strings.Contains(msg, "500") || !strings.Contains(msg, "database is down") {
		t.Errorf("error %q lacks the status or the response body", msg)
	}
}

func TestWebhookRejectsBadURL(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cfg := Config{Path: pluginPath(t, "webhook"), SinkID: "t"}
	p, err := Launch(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	err = p.Configure(ctx, json.RawMessage(`{"url":"ftp://example.com/x"}`))
	var ce *pluginkit.ConfigError
	if !errors.As(err, &ce) || ce.Field != "url" {
		t.Fatalf("Configure = %v, want a ConfigError for url", err)
	}

	// The same through the validate helper, which never opens the sink.
	info, err := Describe(ctx, cfg, json.RawMessage(`{"url":"mailto:x@example.com"}`))
	if !errors.As(err, &ce) || ce.Field != "url" {
		t.Fatalf("Describe = %v, want a ConfigError for url", err)
	}
	if info.Name != "webhook" {
		t.Errorf("Describe info = %+v", info)
	}
	if _, err := Describe(ctx, cfg, json.RawMessage(`{"url":"https://example.com"}`)); err != nil {
		t.Errorf("Describe with a valid config: %v", err)
	}
}

// The caller's deadline crosses the process boundary: when it passes, the
// plugin's HTTP request is cancelled too.
func TestDeadlineReachesSink(t *testing.T) {
	t.Parallel()
	cancelled := make(chan struct{})
	srv, _ := receiver(t, func(_ http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		close(cancelled)
	})
	p := launch(t, "webhook", Config{SinkID: "t"}, map[string]any{"url": srv.URL})

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := p.Deliver(ctx, attempt.Batch{Events: events("0/1:0")})
	if kind, _ := attempt.KindOf(err); err == nil || kind != attempt.KindRetry {
		t.Fatalf("Deliver = %v, want a retryable error", err)
	}
	// gRPC hands the plugin the same deadline, so the plugin's own timeout
	// may answer first, before the host's context has ended: then the
	// deadline shows in the plugin's message rather than as ctx.Err().
	if !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "deadline exceeded") {
		t.Errorf("Deliver = %v, want a deadline error", err)
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin's request was not cancelled")
	}
}

func TestKilledPluginGivesRetryable(t *testing.T) {
	t.Parallel()
	srv, _ := receiver(t, func(w http.ResponseWriter, _ *http.Request) {})
	p := launch(t, "webhook", Config{SinkID: "t"}, map[string]any{"url": srv.URL})
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, err := p.Deliver(t.Context(), attempt.Batch{Events: events("0/1:0")})
	if err == nil {
		t.Fatal("Deliver to a killed plugin succeeded")
	}
	if kind, _ := attempt.KindOf(err); kind != attempt.KindRetry {
		t.Errorf("kind = %s, want retryable (%v)", kind, err)
	}
	waitFor(t, 10*time.Second, "Exited", p.Exited)
}

func TestSupervisedRestartsAfterCrash(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv, reqs := receiver(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			<-r.Context().Done() // hold the first request until the plugin is killed
		}
	})

	logs := newRecorder()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cfg := Config{Path: pluginPath(t, "webhook"), SinkID: "sup", Logger: slog.New(logs)}
	s, err := Start(ctx, cfg, json.RawMessage(`{"url":"`+srv.URL+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if s.Info().Name != "webhook" {
		t.Errorf("Info = %+v", s.Info())
	}

	// Kill the plugin while it is in the middle of a Deliver.
	batch := events("0/2:0", "0/2:1")
	errc := make(chan error, 1)
	go func() {
		_, err := s.Deliver(ctx, attempt.Batch{Events: batch})
		errc <- err
	}()
	<-reqs
	pid := s.Pid()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = <-errc
	if kind, _ := attempt.KindOf(err); err == nil || kind != attempt.KindRetry {
		t.Fatalf("Deliver during the crash = %v, want a retryable error", err)
	}
	// The caller's log line and error already name the sink.
	if strings.Contains(err.Error(), "sup") {
		t.Errorf("Deliver during the crash = %q: repeats the sink id", err)
	}

	// The redelivery relaunches the plugin and goes through.
	if _, err := s.Deliver(ctx, attempt.Batch{Events: batch}); err != nil {
		t.Fatalf("redelivery after the crash: %v", err)
	}
	req := <-reqs
	if req.header.Get("Webhook-Id") != webhookID(batch) {
		t.Errorf("redelivered batch id = %q", req.header.Get("Webhook-Id"))
	}
	if got := s.Restarts(); got != 1 {
		t.Errorf("Restarts = %d, want 1", got)
	}
	if newPid := s.Pid(); newPid == 0 || newPid == pid {
		t.Errorf("pid after restart = %d (was %d)", newPid, pid)
	}
	// The crash is logged once, by the supervisor, with how the process
	// ended; go-plugin's own "plugin process exited" lines (the crash,
	// and the clean exit of the plugin that described itself at Start)
	// are at debug only.
	if r, ok := logs.find("sink plugin process died"); !ok {
		t.Error("no log record of the crash")
	} else if r.attrs["exit"] != "signal: killed" || r.attrs["sink"] != "sup" {
		t.Errorf("crash record %+v, want exit=signal: killed and sink=sup", r.attrs)
	}
	logs.mu.Lock()
	for _, r := range *logs.records {
		if r.msg == "plugin process exited" && r.level > slog.LevelDebug {
			t.Errorf("go-plugin's exit line at %v: %+v", r.level, r.attrs)
		}
	}
	logs.mu.Unlock()
}

func TestLaunchChecksSHA256(t *testing.T) {
	t.Parallel()
	path := pluginPath(t, "stdout")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	_, err := Launch(ctx, Config{Path: path, SHA256: strings.Repeat("0", 64)})
	if err == nil {
		t.Fatal("Launch started a binary whose SHA-256 does not match")
	}

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	p, err := Launch(ctx, Config{Path: path, SHA256: hex.EncodeToString(sum[:])})
	if err != nil {
		t.Fatalf("Launch with the right SHA-256: %v", err)
	}
	p.Kill()
}

func TestStdoutPlugin(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	batch := events("0/3:0", "0/3:1")
	want := string(batch[0].Payload) + "\n" + string(batch[1].Payload) + "\n"

	t.Run("file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "out.jsonl")
		p := launch(t, "stdout", Config{SinkID: "file"}, map[string]any{"path": path})
		if _, err := p.Deliver(ctx, attempt.Batch{Events: batch}); err != nil {
			t.Fatal(err)
		}
		// Deliver returned: the lines are already in the file.
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("file = %q, want %q", got, want)
		}
	})

	t.Run("stdout", func(t *testing.T) {
		var out syncBuffer
		p := launch(t, "stdout", Config{SinkID: "out", Stdout: &out}, map[string]any{})
		if _, err := p.Deliver(ctx, attempt.Batch{Events: batch}); err != nil {
			t.Fatal(err)
		}
		// go-plugin streams the plugin's stdout asynchronously.
		waitFor(t, 10*time.Second, "the plugin's stdout", func() bool { return out.String() == want })
	})
}

// webhookID is the webhook-id the README specifies for a batch: "wc1_" and
// the first 128 bits, in hex, of the SHA-256 of its event ids, each
// followed by a newline.
func webhookID(batch []pluginkit.Event) string {
	h := sha256.New()
	for _, e := range batch {
		io.WriteString(h, e.ID.String()+"\n")
	}
	return "wc1_" + hex.EncodeToString(h.Sum(nil)[:16])
}
