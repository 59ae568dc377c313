package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// needChromium returns the path of Debian's chromium. In CI (CI=true) a
// missing one fails the test: `make tools` installs it. By hand the test is
// skipped with what to run.
func needChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium not found in CI: the Makefile's tools target installs it (apt-get install -y chromium)")
	}
	t.Skip("chromium not found: run `make tools` (apt-get install -y chromium) to test the stream from a real browser")
	return ""
}

// browserPage runs in Chromium, served from its own origin. It reads the
// stream of another origin twice, then posts what it saw back:
//   - fetch with Authorization: Bearer and Last-Event-ID, which makes the
//     browser send a CORS preflight first;
//   - EventSource through a proxy whose first answer sets the id "bogus"
//     and ends, so that the browser reconnects with Last-Event-ID: bogus.
const browserPage = `<!doctype html><meta charset="utf-8"><title>walcast sse</title>
<script>
const out = {};
async function readFetch() {
  try {
    const r = await fetch(%q, {headers: {"Authorization": "Bearer s3cret", "Last-Event-ID": "0/10:0"}});
    out.fetch_status = r.status;
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let text = "";
    while (!text.includes("id: 0/10:2")) {
      const {value, done} = await reader.read();
      if (done) break;
      text += dec.decode(value);
    }
    reader.cancel();
    out.fetch_ids = [...text.matchAll(/^id: (.*)$/gm)].map(m => m[1]);
  } catch (e) {
    out.fetch_error = String(e);
  }
}
function readEventSource() {
  return new Promise((resolve) => {
    const es = new EventSource(%q);
    out.es_events = [];
    es.addEventListener("prime", (m) => out.es_events.push("prime id=" + m.lastEventId));
    es.addEventListener("gap", (m) => out.es_events.push("gap " + m.data));
    es.addEventListener("change", (m) => {
      out.es_events.push("change id=" + m.lastEventId);
      if (m.lastEventId === "0/10:2") { es.close(); resolve(); }
    });
    es.onerror = () => {
      out.es_errors = (out.es_errors || 0) + 1;
      if (es.readyState === EventSource.CLOSED) { out.es_closed = true; resolve(); }
    };
    setTimeout(() => { out.es_timeout = true; es.close(); resolve(); }, 20000);
  });
}
(async () => {
  await readFetch();
  await readEventSource();
  await fetch("/result", {method: "POST", body: JSON.stringify(out)});
})();
</script>`

// browserResult is what the page posts back.
type browserResult struct {
	FetchStatus int      `json:"fetch_status"`
	FetchIDs    []string `json:"fetch_ids"`
	FetchError  string   `json:"fetch_error"`
	ESEvents    []string `json:"es_events"`
	ESErrors    int      `json:"es_errors"`
	ESClosed    bool     `json:"es_closed"`
	ESTimeout   bool     `json:"es_timeout"`
}

// TestChromiumCrossOrigin: headless Chromium reads the stream from a page
// of another origin, with fetch and a Bearer token (preflighted) and with
// EventSource resuming from an id that is not an event id.
func TestChromiumCrossOrigin(t *testing.T) {
	chromium := needChromium(t)

	results := make(chan browserResult, 1)
	page := http.NewServeMux()
	var pageOrigin string
	// Set once the servers the page reads from are up, before Chromium
	// starts.
	var urls atomic.Pointer[[2]string]
	page.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		u := urls.Load()
		fmt.Fprintf(w, browserPage, u[0], u[1])
	})
	page.HandleFunc("/result", func(w http.ResponseWriter, r *http.Request) {
		var res browserResult
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &res); err != nil {
			t.Errorf("page result %q: %v", b, err)
		}
		t.Logf("chromium saw: %s", b)
		select {
		case results <- res:
		default:
		}
	})
	pageSrv := httptest.NewServer(page)
	defer pageSrv.Close()
	pageOrigin = pageSrv.URL

	s, u := open(t, map[string]any{"token": "s3cret", "cors_origins": []string{pageOrigin}})
	deliver(t, s, events(0x10, 3, "t"))

	// The proxy's first answer plants the id "bogus" and ends the stream;
	// after that it passes requests (Origin and Last-Event-ID included)
	// to the sink.
	target, _ := url.Parse(u)
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	rp.FlushInterval = -1
	var primed atomic.Bool
	var resumedWith atomic.Value
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !primed.Swap(true) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Access-Control-Allow-Origin", pageOrigin)
			io.WriteString(w, "retry: 100\nid: bogus\nevent: prime\ndata: x\n\n")
			return
		}
		resumedWith.Store(r.Header.Get("Last-Event-ID"))
		r.Host = target.Host
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	urls.Store(&[2]string{u, proxy.URL + target.Path + "?token=s3cret"})

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir="+t.TempDir(), pageSrv.URL+"/")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()

	var res browserResult
	select {
	case res = <-results:
	case err := <-exited:
		t.Fatalf("chromium exited before the page reported: %v\n%s", err, stderr.String())
	case <-ctx.Done():
		t.Fatalf("the page reported nothing within 2 minutes\n%s", stderr.String())
	}

	if res.FetchError != "" || res.FetchStatus != http.StatusOK || strings.Join(res.FetchIDs, ",") != "0/10:1,0/10:2" {
		t.Errorf("cross-origin fetch with a Bearer token: status %d, ids %v, error %q; want 200 and 0/10:1,0/10:2",
			res.FetchStatus, res.FetchIDs, res.FetchError)
	}
	if got, _ := resumedWith.Load().(string); got != "bogus" {
		t.Errorf("EventSource reconnected with Last-Event-ID %q, want bogus", got)
	}
	want := []string{"prime id=bogus", `gap {"requested":"bogus","oldest":"0/10:0"}`, "change id=0/10:0", "change id=0/10:1", "change id=0/10:2"}
	if strings.Join(res.ESEvents, "\n") != strings.Join(want, "\n") || res.ESClosed {
		t.Errorf("EventSource saw %q (closed for good: %v), want %q", res.ESEvents, res.ESClosed, want)
	}
}
