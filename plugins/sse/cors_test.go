package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/walcast/walcast/pluginkit"
)

func TestPreflightAndOrigins(t *testing.T) {
	_, url := open(t, map[string]any{"token": "s3cret", "cors_origins": []string{"https://app.example.com", "http://localhost:3000"}})
	do := func(method string, h http.Header) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, url, nil)
		req.Header = h
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	pre := do(http.MethodOptions, http.Header{"Origin": {"http://localhost:3000"}, "Access-Control-Request-Method": {"GET"},
		"Access-Control-Request-Headers": {"authorization,last-event-id"}})
	h := pre.Header
	if pre.StatusCode != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != "http://localhost:3000" ||
		!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Authorization") || !strings.Contains(h.Get("Access-Control-Allow-Headers"), "Last-Event-ID") ||
		!strings.Contains(h.Get("Access-Control-Allow-Methods"), "GET") || h.Get("Access-Control-Max-Age") == "" || !strings.Contains(strings.Join(h.Values("Vary"), ","), "Origin") {
		t.Errorf("preflight: %s %v", pre.Status, h)
	}
	if r := do(http.MethodOptions, http.Header{"Origin": {"https://evil.example"}, "Access-Control-Request-Method": {"GET"}}); r.StatusCode != http.StatusForbidden || r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight from another origin: %s %v", r.Status, r.Header)
	}
	get := do(http.MethodGet, http.Header{"Origin": {"https://evil.example"}, "Authorization": {"Bearer s3cret"}})
	if get.Header.Get("Access-Control-Allow-Origin") != "" || get.Header.Get("Vary") != "Origin" {
		t.Errorf("GET from another origin: CORS headers %v", get.Header)
	}
}

func TestCORSConfig(t *testing.T) {
	for _, tt := range []struct {
		cfg   map[string]any
		field string // "" when accepted
	}{
		{map[string]any{"cors_origins": []string{"*"}}, ""},
		{map[string]any{"cors_origins": []string{"*"}, "token": "x"}, "cors_origins"},
		{map[string]any{"cors_origin": "*", "token": "x"}, "cors_origin"},
		{map[string]any{"cors_origins": []string{"*"}, "cors_credentials": true}, "cors_credentials"},
		{map[string]any{"cors_credentials": true}, "cors_credentials"},
		{map[string]any{"cors_origins": []string{"https://a.example"}, "cors_credentials": true, "token": "x"}, ""},
		{map[string]any{"cors_origins": []string{"a.example"}}, "cors_origins"},
		{map[string]any{"cors_origins": []string{"https://a.example/app"}}, "cors_origins"},
	} {
		tt.cfg["listen"] = "127.0.0.1:0"
		raw, _ := json.Marshal(tt.cfg)
		err := newSink(discardLogger()).Configure(t.Context(), pluginkit.Setup{Config: raw})
		var field string
		if ces := pluginkit.ConfigErrors(err); len(ces) == 1 {
			field = ces[0].Field
		} else if err != nil {
			t.Fatalf("%s: %v is not a config error", raw, err)
		}
		if field != tt.field {
			t.Errorf("%s: error %v, want one about %q", raw, err, tt.field)
		}
	}
}

// A Last-Event-ID that is not an event id gets the gap frame and the whole
// window, not a 400 (which would end a browser's EventSource for good), and
// the gap's oldest is null while the window is empty.
func TestMalformedLastEventIDGetsGap(t *testing.T) {
	s, url := open(t, map[string]any{})
	c := dial(t, url, http.Header{"Last-Event-ID": {"not-an-id"}})
	f := c.next()
	if f.Event != "gap" || f.Data != `{"requested":"not-an-id","oldest":null}` {
		t.Fatalf("empty window: got %+v, want a gap with oldest null", f)
	}
	deliver(t, s, events(0x10, 3, "t"))
	c2 := dial(t, url, http.Header{"Last-Event-ID": {"0/zz"}})
	if f := c2.next(); f.Event != "gap" || f.Data != `{"requested":"0/zz","oldest":"0/10:0"}` {
		t.Fatalf("got %+v, want a gap naming 0/10:0", f)
	}
	for _, want := range []string{"0/10:0", "0/10:1", "0/10:2"} {
		if f := c2.next(); f.ID != want {
			t.Fatalf("after the gap got %+v, want %s", f, want)
		}
	}
}
