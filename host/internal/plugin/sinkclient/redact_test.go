package sinkclient

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/proto/sink/wire"
)

func TestRedactURLs(t *testing.T) {
	tests := []struct{ in, want string }{
		{"no url here", "no url here"},
		{"POST https://hooks.slack.com/services/T000/B000/XXXX: 500 Internal Server Error",
			"POST https://hooks.slack.com: 500 Internal Server Error"},
		{`Post "https://u:p@api.example:8443/v1/hook?token=abc&x=1#frag": dial tcp: refused`,
			`Post "https://api.example:8443": dial tcp: refused`},
		{"see (https://example.com/a/b).", "see (https://example.com)."},
		{"two: http://a.example/x?k=1, http://b.example/y", "two: http://a.example, http://b.example"},
		{"redis://:secret@cache:6379/0 and postgres://walcast:pw@db/shop?sslmode=require",
			"redis://cache:6379 and postgres://db"},
		{"https://host.example?token=abc", "https://host.example"},
		{"unix:///run/plugin.sock stays", "unix:///run/plugin.sock stays"},
		{"file:///etc/walcast/ca.pem", "file:///etc/walcast/ca.pem"},
		{"host:port 127.0.0.1:50051", "host:port 127.0.0.1:50051"},
	}
	for _, tt := range tests {
		if got := redactURLs(tt.in); got != tt.want {
			t.Errorf("redactURLs(%q)\n = %q\nwant %q", tt.in, got, tt.want)
		}
	}
}

// secretHook is a hook URL with a credential in every part a URL has.
const secretHook = "https://hookuser:hookpass@hooks.example/services/T0SECRET/B0SECRET/pathtoken?token=querytoken"

func assertNoSecret(t *testing.T, what, text string) {
	t.Helper()
	for _, p := range []string{"hookuser", "hookpass", "T0SECRET", "B0SECRET", "pathtoken", "querytoken"} {
		if strings.Contains(text, p) {
			t.Errorf("%s shows %q: %s", what, p, text)
		}
	}
	if !strings.Contains(text, "https://hooks.example") {
		t.Errorf("%s lost the host: %s", what, text)
	}
}

// TestPluginErrorsHideURLs: whatever a plugin puts in an error (a
// third-party sink may show its whole URL), the host's copy of it, which
// goes to the log, walcast.parked.last_error, walcast status and
// walcast validate, shows scheme and host only.
func TestPluginErrorsHideURLs(t *testing.T) {
	for _, f := range []wire.Fault{
		{Kind: wire.FaultRetryable, Msg: "POST " + secretHook + ": 500"},
		{Kind: wire.FaultPermanent, Msg: "POST " + secretHook + ": 413"},
		{Kind: wire.FaultFatal, Msg: "gone: " + secretHook},
		{Kind: wire.FaultThrottled, Msg: "throttled: " + secretHook},
		{Kind: wire.FaultConfig, Msg: "url: unreachable " + secretHook, Violations: []wire.Violation{{Field: "url", Msg: "unreachable " + secretHook}}},
	} {
		err := fromStatus(f.Err())
		assertNoSecret(t, "error", err.Error())
		var ce *pluginkit.ConfigError
		if errors.As(err, &ce) {
			assertNoSecret(t, "config error", ce.Error())
		}
	}
}

// TestPluginLogsHideURLs: the plugin's log lines (hclog JSON on its
// stderr stream, or plain text) reach walcast's log with every URL cut to
// scheme and host, in the message and in attributes, nested ones too.
func TestPluginLogsHideURLs(t *testing.T) {
	var buf bytes.Buffer
	w := newLineLogger(newHCLogSlog(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	lines := []string{
		`{"@level":"error","@message":"POST ` + secretHook + ` failed","url":"` + secretHook + `","req":{"target":"` + secretHook + `"},"urls":["` + secretHook + `"]}`,
		`panic: Post "` + secretHook + `": EOF`,
	}
	for _, l := range lines {
		if _, err := w.Write([]byte(l + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Count(buf.String(), "\n"); got != 2 {
		t.Fatalf("%d log records, want 2:\n%s", got, buf.String())
	}
	for _, rec := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		assertNoSecret(t, "log record", rec)
	}
	// go-plugin's own lines, errors as attribute values included.
	buf.Reset()
	newHCLogSlog(slog.New(slog.NewJSONHandler(&buf, nil))).Error("plugin failed "+secretHook, "error", errors.New("dial "+secretHook))
	assertNoSecret(t, "log record", buf.String())
}
