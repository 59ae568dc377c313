package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/control/checkpoints"
	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/control/pauses"
	"github.com/walcast/walcast/host/internal/control/reports"
	"github.com/walcast/walcast/host/internal/control/schema"
	"github.com/walcast/walcast/host/internal/report"
	"github.com/walcast/walcast/host/pgtest"
	"github.com/walcast/walcast/pluginkit/cdc"
)

var cluster *pgtest.Cluster

func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }

// fakeActions records what the buttons asked for.
type fakeActions struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeActions) Replay(_ context.Context, pipeline string, req parking.ReplayRequest) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := "all"
	if !req.ID.IsZero() {
		id = req.ID.String()
	}
	f.calls = append(f.calls, "replay "+pipeline+" "+req.Sink+" "+id)
	return "asked the running daemon", nil
}

func (f *fakeActions) SetPaused(_ context.Context, pipeline, sink string, paused bool) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	verb := "resume"
	if paused {
		verb = "pause"
	}
	f.calls = append(f.calls, verb+" "+pipeline+" "+sink)
	return verb + "d", nil
}

func (f *fakeActions) took() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// parkedID is the event the fixture parks.
var parkedID = cdc.MustParseEventID("0/16B3F40:2")

// fixture is a console over pipeline "shop" in a fresh database, with a
// slot, a checkpoint, a parked event, usage and a paused sink.
func fixture(t *testing.T, token string) (*Server, *fakeActions, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cluster.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	slot := "walcast_console_" + strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]`).ReplaceAllString(t.Name(), "_"))
	if _, err := pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, slot) })
	if err := checkpoints.New(pool, "shop").Save(ctx, map[string]cdc.EventID{"hook": cdc.MustParseEventID("0/16B3F00:7")}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := parking.New(pool, "shop").Park(ctx, []parking.Event{{
		Sink: "hook", Row: "public.orders{\"id\":13}", Attempts: 3, LastError: "webhook: 500 Internal Server Error <b>boom</b>",
		FirstFailure: now.Add(-time.Minute), LastFailure: now,
		Event: cdc.Event{ID: parkedID, Schema: "public", Table: "orders", Op: cdc.OpUpdate, Key: []byte(`{"id":13}`),
			Payload: []byte(`{"id":"0/16B3F40:2","after":{"id":13,"note":"<script>alert(1)</script>"}}`)},
	}}); err != nil {
		t.Fatal(err)
	}
	if err := reports.New(pool, "shop").AddUsage(ctx, []reports.Usage{
		{Sink: "hook", Hour: now.Truncate(time.Hour), Attempts: 12, Delivered: 9, Failed: 3, Bytes: 4096},
		{Sink: "hook", Hour: now.Truncate(time.Hour).Add(-2 * time.Hour), Attempts: 5, Delivered: 5, Bytes: 1024},
		{Sink: "hook", Hour: now.Truncate(time.Hour).Add(-48 * time.Hour), Attempts: 1000, Delivered: 1000, Bytes: 1 << 20},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := pauses.New(pool, "shop").SetPaused(ctx, "archive", true); err != nil {
		t.Fatal(err)
	}
	fa := &fakeActions{}
	s, err := New(Config{
		Pipelines: []*report.Pipeline{{Name: "shop", Slot: slot, DB: pool,
			Sinks: []report.Sink{{ID: "hook", Type: "webhook", Durable: true}, {ID: "archive", Type: "batchfiles"}}}},
		Actions: fa, Token: token, SampleEvery: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, fa, pool
}

func get(s *Server, target string, mod func(*http.Request)) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.Host = "127.0.0.1:8080"
	if mod != nil {
		mod(r)
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w
}

func post(s *Server, target string, form url.Values, mod func(*http.Request)) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(form.Encode()))
	r.Host = "127.0.0.1:8080"
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if mod != nil {
		mod(r)
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w
}

func TestPageShowsPipelineState(t *testing.T) {
	s, _, _ := fixture(t, "")
	s.sample(context.Background())
	w := get(s, "/", nil)
	if w.Code != http.StatusOK {
		t.Fatalf("GET /: %d %s", w.Code, w.Body)
	}
	body := w.Body.String()
	for _, want := range []string{
		`pipeline <span class="name">shop</span>`,
		`<span class="badge inactive">inactive</span>`, // the slot exists, nobody streams it
		`<code>0/16B3F00:7</code>`,                     // hook's checkpoint
		`<td class="sink-undelivered">-</td>`,          // no daemon reports a backlog
		`<td class="sink-parked">1</td>`,
		`webhook: 500 Internal Server Error &lt;b&gt;boom&lt;/b&gt;`, // escaped
		`&lt;script&gt;alert(1)&lt;/script&gt;`,                      // the payload, escaped
		`data-event="0/16B3F40:2"`,
		`<span class="usage-attempts">17</span> / <span class="usage-delivered">14</span> / <span class="usage-failed">3</span> / <span class="usage-bytes">5.0 KiB</span>`,
		`<span class="badge paused">paused</span>`, // archive
		`<svg class="chart"`,
		`<polyline class="lag"`, // one lag sample taken
		`name="csrf" value="` + s.csrf + `"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if strings.Contains(body, "<script>") || strings.Contains(body, "<b>boom") {
		t.Error("page contains unescaped data")
	}
	if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	if w := get(s, "/static/console.css", nil); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "svg.chart") {
		t.Errorf("GET /static/console.css: %d", w.Code)
	}
}

func TestPageShowsDatabaseErrors(t *testing.T) {
	s, _, pool := fixture(t, "")
	if _, err := pool.Exec(context.Background(), `DROP TABLE walcast.usage`); err != nil {
		t.Fatal(err)
	}
	w := get(s, "/", nil)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "could not read this pipeline's state: load usage") {
		t.Errorf("GET / with a broken schema: %d\n%s", w.Code, w.Body)
	}
}

func TestActionsArePostsWithTheFormToken(t *testing.T) {
	s, fa, _ := fixture(t, "")
	form := url.Values{"csrf": {s.csrf}, "pipeline": {"shop"}, "sink": {"hook"}, "id": {parkedID.String()}}

	if w := get(s, "/replay?"+form.Encode(), nil); w.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET /replay: %d, want 405", w.Code)
	}
	noToken := url.Values{"pipeline": {"shop"}, "sink": {"hook"}}
	if w := post(s, "/replay", noToken, nil); w.Code != http.StatusForbidden {
		t.Errorf("POST /replay without the form token: %d, want 403", w.Code)
	}
	wrong := url.Values{"csrf": {strings.Repeat("0", 64)}, "pipeline": {"shop"}, "sink": {"hook"}}
	if w := post(s, "/pause", wrong, nil); w.Code != http.StatusForbidden {
		t.Errorf("POST /pause with a wrong form token: %d, want 403", w.Code)
	}
	crossSite := func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "cross-site") }
	if w := post(s, "/replay", form, crossSite); w.Code != http.StatusForbidden {
		t.Errorf("POST /replay marked cross-site: %d, want 403", w.Code)
	}
	otherOrigin := func(r *http.Request) { r.Header.Set("Origin", "http://evil.example") }
	if w := post(s, "/resume", form, otherOrigin); w.Code != http.StatusForbidden {
		t.Errorf("POST /resume from another origin: %d, want 403", w.Code)
	}
	if got := fa.took(); len(got) != 0 {
		t.Fatalf("refused requests acted: %v", got)
	}

	sameOrigin := func(r *http.Request) {
		r.Header.Set("Sec-Fetch-Site", "same-origin")
		r.Header.Set("Origin", "http://127.0.0.1:8080")
	}
	w := post(s, "/replay", form, sameOrigin)
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/#p-shop" {
		t.Fatalf("POST /replay: %d Location %q", w.Code, w.Header().Get("Location"))
	}
	post(s, "/replay", url.Values{"csrf": {s.csrf}, "pipeline": {"shop"}, "sink": {"hook"}}, sameOrigin)
	post(s, "/pause", url.Values{"csrf": {s.csrf}, "pipeline": {"shop"}, "sink": {"archive"}}, sameOrigin)
	post(s, "/resume", url.Values{"csrf": {s.csrf}, "pipeline": {"shop"}}, nil) // curl: neither header
	want := []string{"replay shop hook 0/16B3F40:2", "replay shop hook all", "pause shop archive", "resume shop "}
	if got := fa.took(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("actions = %q, want %q", got, want)
	}
	if w := post(s, "/replay", url.Values{"csrf": {s.csrf}, "pipeline": {"nosuch"}, "sink": {"hook"}}, nil); w.Code != http.StatusBadRequest {
		t.Errorf("POST /replay of an unknown pipeline: %d", w.Code)
	}
	if body := get(s, "/", nil).Body.String(); !strings.Contains(body, "replay 0/16B3F40:2 of sink hook: asked the running daemon") {
		t.Errorf("the page does not show the action taken")
	}
}

func TestWithoutTokenOnlyLoopbackNames(t *testing.T) {
	s, _, _ := fixture(t, "")
	for host, want := range map[string]int{
		"127.0.0.1:8080": http.StatusOK, "localhost:8080": http.StatusOK, "[::1]:8080": http.StatusOK,
		"evil.example:8080": http.StatusMisdirectedRequest, "192.168.1.5:8080": http.StatusMisdirectedRequest,
	} {
		if w := get(s, "/", func(r *http.Request) { r.Host = host }); w.Code != want {
			t.Errorf("GET / with Host %s: %d, want %d", host, w.Code, want)
		}
	}
}

func TestTokenIsRequired(t *testing.T) {
	const token = "s3cret-token"
	s, fa, _ := fixture(t, token)
	public := func(r *http.Request) { r.Host = "console.example:8080" }
	if w := get(s, "/", public); w.Code != http.StatusUnauthorized {
		t.Errorf("GET / without the token: %d, want 401", w.Code)
	}
	if w := get(s, "/?token=wrong", public); w.Code != http.StatusUnauthorized {
		t.Errorf("GET / with a wrong token: %d, want 401", w.Code)
	}
	if w := post(s, "/pause", url.Values{"csrf": {s.csrf}, "pipeline": {"shop"}}, public); w.Code != http.StatusUnauthorized || len(fa.took()) != 0 {
		t.Errorf("POST /pause without the token: %d, %v", w.Code, fa.took())
	}
	w := get(s, "/?token="+token+"&refresh=10", public)
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/?refresh=10" {
		t.Fatalf("GET /?token=...: %d Location %q, want a redirect that drops the token", w.Code, w.Header().Get("Location"))
	}
	cookies := w.Result().Cookies()
	if len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookies %+v, want one HttpOnly SameSite=Strict cookie", cookies)
	}
	withCookie := func(r *http.Request) { public(r); r.AddCookie(cookies[0]) }
	if w := get(s, "/", withCookie); w.Code != http.StatusOK {
		t.Errorf("GET / with the cookie: %d", w.Code)
	}
	bearer := func(r *http.Request) { public(r); r.Header.Set("Authorization", "Bearer "+token) }
	if w := get(s, "/", bearer); w.Code != http.StatusOK {
		t.Errorf("GET / with Authorization: Bearer: %d", w.Code)
	}
	if w := post(s, "/pause", url.Values{"csrf": {s.csrf}, "pipeline": {"shop"}}, withCookie); w.Code != http.StatusSeeOther {
		t.Errorf("POST /pause with the cookie: %d", w.Code)
	}
}

func TestNeedsToken(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": false, "127.0.0.2:80": false, "localhost:8080": false, "[::1]:8080": false,
		":8080": true, "0.0.0.0:8080": true, "[::]:8080": true, "10.0.0.5:8080": true, "console.example:8080": true,
	} {
		got, err := NeedsToken(addr)
		if err != nil || got != want {
			t.Errorf("NeedsToken(%q) = %v, %v; want %v", addr, got, err, want)
		}
	}
	if _, err := NeedsToken("8080"); err == nil {
		t.Error("NeedsToken(\"8080\"): no error")
	}
}

func TestLagKeepsTheLastHour(t *testing.T) {
	s := &Server{lag: map[string][]lagSample{}}
	start := time.Now().Add(-3 * time.Hour)
	for i := 0; i <= 3*60; i++ { // one sample a minute for three hours
		s.addSample("p", lagSample{At: start.Add(time.Duration(i) * time.Minute), Bytes: int64(i)})
	}
	got := s.lag["p"]
	if len(got) != 61 || got[0].Bytes != 120 || cap(got) > 4*61 {
		t.Fatalf("kept %d samples (cap %d) from %d, want the last hour: 61 from 120", len(got), cap(got), got[0].Bytes)
	}
}

func TestCharts(t *testing.T) {
	for v, want := range map[float64]float64{0: 1, 1: 1, 7: 10, 12: 20, 20: 20, 430: 500, 5001: 10000} {
		if got := niceMax([]series{{Values: []float64{v}}}); got != want {
			t.Errorf("niceMax(%v) = %v, want %v", v, got, want)
		}
	}
	hours := make([]hourUsage, 24)
	hours[23] = hourUsage{Hour: time.Date(2026, 1, 1, 23, 0, 0, 0, time.UTC), Attempts: 12, Delivered: 9, Failed: 3, Bytes: 4096}
	svg := string(usageChart(hours))
	if !strings.HasPrefix(svg, "<svg") || !strings.HasSuffix(svg, "</svg>") || strings.Count(svg, `<g class="hour">`) != 2*24 || !strings.Contains(svg, `>5.0 KiB</text>`) ||
		!strings.Contains(svg, "2026-01-01 23:00 UTC: 12 attempts, 9 delivered events, 3 failed attempts, 4.0 KiB") {
		t.Errorf("usage chart:\n%s", svg)
	}
	now := time.Now()
	svg = string(lagChart([]lagSample{{At: now.Add(-time.Minute), Bytes: 100}, {At: now, Bytes: 2048}}, now))
	if !strings.Contains(svg, `<polyline class="lag" points="`) || !strings.Contains(svg, "2.0 KiB") || !strings.Contains(svg, `>2.0 KiB</text>`) {
		t.Errorf("lag chart:\n%s", svg)
	}
}

// TestPageBoundsTheParkedList: a sink with many parked events shows its
// full count and only the most recent events.
func TestPageBoundsTheParkedList(t *testing.T) {
	s, _, _ := fixture(t, "")
	p := s.cfg.Pipelines[0]
	var ps []parking.Event
	old := time.Now().Add(-time.Hour)
	for i := range 250 {
		ps = append(ps, parking.Event{Sink: "hook", Row: "r", Attempts: 1, LastError: "old", FirstFailure: old, LastFailure: old,
			Event: cdc.Event{ID: cdc.EventID{CommitLSN: 0x100, Index: uint64(i)}, Schema: "public", Table: "orders", Op: cdc.OpInsert,
				Key: []byte(`{}`), Payload: []byte(`{}`)}})
	}
	if err := parking.New(p.DB, p.Name).Park(context.Background(), ps); err != nil {
		t.Fatal(err)
	}
	body := get(s, "/", nil).Body.String()
	if n := strings.Count(body, `<tr class="parked-event"`); n != maxParkedShown {
		t.Errorf("page lists %d parked events, want %d", n, maxParkedShown)
	}
	for _, want := range []string{`<td class="sink-parked">251</td>`, "(the 200 most recent of 251)", `data-event="0/16B3F40:2"`,
		"webhook: 500 Internal Server Error"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %s", want)
		}
	}
}
