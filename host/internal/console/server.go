package console

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/report"
	"github.com/walcast/walcast/pluginkit/cdc"
)

//go:embed assets
var assets embed.FS

var page = template.Must(template.New("page.html").Funcs(template.FuncMap{
	"bytes": report.Bytes,
	"time":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
}).ParseFS(assets, "assets/page.html"))

// Actions carries out what the page's buttons ask for; the command line
// implements it with the code of `walcast replay`, `pause` and `resume`.
// Each returns what happened in words, shown on the page. The context
// ends with the HTTP request.
type Actions interface {
	Replay(ctx context.Context, pipeline string, req parking.ReplayRequest) (string, error)
	SetPaused(ctx context.Context, pipeline, sink string, paused bool) (string, error)
}

// Config is what New needs.
type Config struct {
	Pipelines []*report.Pipeline
	Actions   Actions
	// Token, when set, is required on every request. Listening beyond
	// loopback without one is refused by the command line (NeedsToken).
	Token string
	// SampleEvery is how often Run samples each slot's lag; 0 means 5s.
	SampleEvery time.Duration
	Logger      *slog.Logger
}

// Server is the console's HTTP handler and its lag sampler.
type Server struct {
	cfg     Config
	csrf    string
	log     *slog.Logger
	handler http.Handler

	mu    sync.Mutex
	lag   map[string][]lagSample // per pipeline, oldest first
	notes []note                 // the last actions taken, newest first
}

// lagSample is a slot's lag (WAL after its confirmed position) at a time.
type lagSample struct {
	At    time.Time
	Bytes int64
}

// lagWindow is how much lag history is kept and drawn.
const lagWindow = time.Hour

// note is an action taken through the console, shown on the page.
type note struct {
	At   time.Time
	Text string
	Err  bool
}

const maxNotes = 10

// cookieName holds the access token in the browser after /?token=....
const cookieName = "walcast_console_token"

// New returns a console server. Call Run to sample lag.
func New(cfg Config) (*Server, error) {
	if cfg.Actions == nil {
		return nil, errors.New("console: no Actions")
	}
	if cfg.SampleEvery <= 0 {
		cfg.SampleEvery = 5 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("console: CSRF token: %w", err)
	}
	s := &Server{cfg: cfg, csrf: hex.EncodeToString(b[:]), log: log, lag: map[string][]lagSample{}}
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.index)
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("POST /replay", s.replay)
	mux.HandleFunc("POST /pause", s.pause(true))
	mux.HandleFunc("POST /resume", s.pause(false))
	// CrossOriginProtection refuses unsafe methods that a browser marks
	// as sent from another site (Sec-Fetch-Site, else Origin vs Host);
	// the form's CSRF token covers clients that send neither.
	s.handler = s.guard(http.NewCrossOriginProtection().Handler(mux))
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// NeedsToken reports whether listening on addr (host:port) exposes the
// console beyond this machine: any host but a loopback address or
// "localhost", including the empty host (every interface).
func NeedsToken(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("listen address %q: %w", addr, err)
	}
	return !isLoopbackName(host), nil
}

func isLoopbackName(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// guard authenticates every request and sets the headers every answer
// carries.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		if s.cfg.Token == "" {
			// Only loopback listens run without a token; a browser page
			// of another site that rebinds its DNS name to 127.0.0.1
			// still sends its own name as Host, and is refused here.
			host, _, err := net.SplitHostPort(r.Host)
			if err != nil {
				host = r.Host
			}
			if !isLoopbackName(host) {
				http.Error(w, "this console answers only to localhost, 127.0.0.1 or [::1]; start it with --token to reach it by another name", http.StatusMisdirectedRequest)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if tok := r.URL.Query().Get("token"); tok != "" && r.Method == http.MethodGet {
			if !s.tokenOK(tok) {
				http.Error(w, "wrong token", http.StatusUnauthorized)
				return
			}
			http.SetCookie(w, &http.Cookie{Name: cookieName, Value: tok, Path: "/", HttpOnly: true,
				SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
			q := r.URL.Query()
			q.Del("token")
			u := *r.URL
			u.RawQuery = q.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		if c, err := r.Cookie(cookieName); err == nil && s.tokenOK(c.Value) {
			next.ServeHTTP(w, r)
			return
		}
		if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && s.tokenOK(bearer) {
			next.ServeHTTP(w, r)
			return
		}
		h.Set("WWW-Authenticate", `Bearer realm="walcast console"`)
		http.Error(w, "this console needs its token: open /?token=... once, or send Authorization: Bearer ...", http.StatusUnauthorized)
	})
}

func (s *Server) tokenOK(t string) bool {
	return subtle.ConstantTimeCompare([]byte(t), []byte(s.cfg.Token)) == 1
}

// pageData is what assets/page.html renders.
type pageData struct {
	Now       time.Time
	CSRF      string
	Refresh   int
	Notes     []note
	Pipelines []pipelineView
}

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	now := time.Now()
	d := pageData{Now: now, CSRF: s.csrf}
	if n, err := strconv.Atoi(r.URL.Query().Get("refresh")); err == nil && n >= 2 {
		d.Refresh = n
	}
	for _, p := range s.cfg.Pipelines {
		v, err := load(ctx, p, now)
		if err != nil {
			s.log.Warn("console: read pipeline state", "pipeline", p.Name, "err", err)
			v.Err = err.Error()
		}
		samples := s.lagSamples(p.Name, now)
		v.LagChart = lagChart(samples, now)
		v.LagSampleCount = len(samples)
		d.Pipelines = append(d.Pipelines, v)
	}
	s.mu.Lock()
	d.Notes = append([]note(nil), s.notes...)
	s.mu.Unlock()
	var buf bytes.Buffer
	if err := page.Execute(&buf, d); err != nil {
		s.log.Error("console: render page", "err", err)
		http.Error(w, "render page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(buf.Bytes())
}

// form checks a POST's CSRF token and returns the pipeline it names.
func (s *Server) form(w http.ResponseWriter, r *http.Request) (*report.Pipeline, bool) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad form: "+err.Error(), http.StatusBadRequest)
		return nil, false
	}
	if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(s.csrf)) != 1 {
		http.Error(w, "missing or stale form token: reload the page and try again", http.StatusForbidden)
		return nil, false
	}
	name := r.PostForm.Get("pipeline")
	for _, p := range s.cfg.Pipelines {
		if p.Name == name {
			return p, true
		}
	}
	http.Error(w, fmt.Sprintf("no pipeline %q in this console", name), http.StatusBadRequest)
	return nil, false
}

func (s *Server) replay(w http.ResponseWriter, r *http.Request) {
	p, ok := s.form(w, r)
	if !ok {
		return
	}
	req := parking.ReplayRequest{Sink: r.PostForm.Get("sink")}
	if id := r.PostForm.Get("id"); id != "" {
		var err error
		if req.ID, err = cdc.ParseEventID(id); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	what := fmt.Sprintf("replay all parked events of sink %s", req.Sink)
	if !req.ID.IsZero() {
		what = fmt.Sprintf("replay %s of sink %s", req.ID, req.Sink)
	}
	msg, err := s.cfg.Actions.Replay(r.Context(), p.Name, req)
	s.done(w, r, p, what, msg, err)
}

func (s *Server) pause(paused bool) http.HandlerFunc {
	verb := "resume"
	if paused {
		verb = "pause"
	}
	return func(w http.ResponseWriter, r *http.Request) {
		p, ok := s.form(w, r)
		if !ok {
			return
		}
		sink := r.PostForm.Get("sink")
		what := verb + " pipeline " + p.Name
		if sink != "" {
			what = verb + " sink " + sink
		}
		msg, err := s.cfg.Actions.SetPaused(r.Context(), p.Name, sink, paused)
		s.done(w, r, p, what, msg, err)
	}
}

// done records an action's outcome for the page and sends the browser
// back to it (POST, redirect, GET: a reload does not repeat the action).
func (s *Server) done(w http.ResponseWriter, r *http.Request, p *report.Pipeline, what, msg string, err error) {
	n := note{At: time.Now(), Text: what + ": " + strings.TrimSpace(msg)}
	if err != nil {
		n.Err = true
		n.Text = what + ": " + strings.TrimSpace(strings.TrimSpace(msg)+" "+err.Error())
		s.log.Warn("console action failed", "pipeline", p.Name, "action", what, "remote", r.RemoteAddr, "err", err)
	} else {
		s.log.Info("console action", "pipeline", p.Name, "action", what, "remote", r.RemoteAddr)
	}
	s.mu.Lock()
	s.notes = append([]note{n}, s.notes...)
	if len(s.notes) > maxNotes {
		s.notes = s.notes[:maxNotes]
	}
	s.mu.Unlock()
	http.Redirect(w, r, "/#p-"+url.PathEscape(p.Name), http.StatusSeeOther)
}

// Run samples every pipeline's slot lag until ctx ends, keeping the last
// hour in memory.
func (s *Server) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.SampleEvery)
	defer t.Stop()
	for {
		s.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) sample(ctx context.Context) {
	for _, p := range s.cfg.Pipelines {
		qctx, cancel := context.WithTimeout(ctx, s.cfg.SampleEvery)
		st, err := report.ReadSlot(qctx, p.DB, p.Slot)
		cancel()
		if err != nil || !st.Exists {
			if err != nil && ctx.Err() == nil {
				s.log.Warn("console: sample slot lag", "pipeline", p.Name, "err", err)
			}
			continue
		}
		s.addSample(p.Name, lagSample{At: time.Now(), Bytes: st.Lag})
	}
}

func (s *Server) addSample(pipeline string, ls lagSample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	samples := append(s.lag[pipeline], ls)
	i := 0
	for i < len(samples) && ls.At.Sub(samples[i].At) > lagWindow {
		i++
	}
	// Copy down rather than reslice, so the array does not grow forever.
	s.lag[pipeline] = append(samples[:0], samples[i:]...)
}

func (s *Server) lagSamples(pipeline string, now time.Time) []lagSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []lagSample
	for _, ls := range s.lag[pipeline] {
		if now.Sub(ls.At) <= lagWindow {
			out = append(out, ls)
		}
	}
	return out
}

// prettyJSON indents a payload for reading; anything else is shown as is.
func prettyJSON(b []byte) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return string(b)
	}
	return buf.String()
}
