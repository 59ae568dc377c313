package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

const (
	defaultPath      = "/events"
	defaultRetention = time.Hour
	defaultMaxEvents = 10000
	defaultMaxBytes  = 64 << 20
	defaultHeartbeat = 15 * time.Second
	defaultClients   = 1000
	// writeTimeout bounds one write to a client; a client that cannot take
	// a frame for this long is disconnected (it can resume).
	writeTimeout = 30 * time.Second
	// reconnectMillis is the delay a browser waits before reconnecting.
	reconnectMillis = 2000
)

// Sink serves the change stream to HTTP clients as server-sent events. It
// is not durable: Deliver only appends to the retention window, so the
// host never waits for a browser, and a client that was away longer than
// the window is told so with a gap frame instead of being replayed what is
// gone.
type Sink struct {
	log *slog.Logger
	now func() time.Time

	mu      sync.Mutex
	cfg     settings
	ring    *ring
	srv     *http.Server
	addr    net.Addr
	done    chan struct{} // closed by Close: streaming handlers return
	clients atomic.Int64

	onOpen func(url string) // tests: connect a client as soon as Open listens
}

type settings struct {
	listen     string
	path       string
	maxEvents  int
	maxBytes   int
	retention  time.Duration
	heartbeat  time.Duration
	token      string
	cors       cors
	maxClients int
}

var _ pluginkit.BatchSink = (*Sink)(nil)

// New returns an SSE sink that logs through pluginkit.NewLogger.
func New() *Sink { return newSink(pluginkit.NewLogger()) }

func newSink(log *slog.Logger) *Sink { return &Sink{log: log, now: time.Now} }

// Info describes the sink. Ordered: the window must hold events in id
// order for Last-Event-ID to mean "everything after this". Routes: the
// route is the channel, <path>/<channel>.
func (s *Sink) Info() pluginkit.Info {
	return pluginkit.Info{
		Name:    "sse",
		Version: pluginkit.BuildVersion(),
		Ordered: true,
		Routes:  true,
		Config: []pluginkit.ConfigField{
			{Name: "listen", Type: pluginkit.TypeString, Required: true, Doc: `Address the HTTP server listens on, for example "127.0.0.1:8090".`},
			{Name: "path", Type: pluginkit.TypeString, Doc: `URL path of the stream. Default "/events".`},
			{Name: "retention", Type: pluginkit.TypeDuration, Doc: `How long events stay resumable. Default "1h".`},
			{Name: "retention_events", Type: pluginkit.TypeNumber, Doc: "How many events stay resumable. Default 10000."},
			{Name: "retention_mb", Type: pluginkit.TypeNumber, Doc: "How many MiB of events stay resumable (the window is in memory). Default 64."},
			{Name: "heartbeat", Type: pluginkit.TypeDuration, Doc: `Comment line sent to idle clients so proxies keep the connection. Default "15s".`},
			{Name: "token", Type: pluginkit.TypeString, Doc: "When set, clients must send Authorization: Bearer <token> or ?token=<token>."},
			{Name: "cors_origins", Type: pluginkit.TypeStringList, Doc: `Origins whose pages may read the stream (CORS), for example ["https://app.example.com"]; "*" for any, only without token.`},
			{Name: "cors_origin", Type: pluginkit.TypeString, Doc: `One origin, as in cors_origins (kept for older configs).`},
			{Name: "cors_credentials", Type: pluginkit.TypeBool, Doc: "Send Access-Control-Allow-Credentials: true, for pages that fetch with credentials (cookies); needs cors_origins. Default false."},
			{Name: "max_clients", Type: pluginkit.TypeNumber, Doc: "Connected clients at most; more are answered 503. Default 1000."},
		},
	}
}

type config struct {
	Listen          string   `json:"listen"`
	Path            string   `json:"path"`
	Retention       string   `json:"retention"`
	RetentionEvents *float64 `json:"retention_events"`
	RetentionMB     *float64 `json:"retention_mb"`
	Heartbeat       string   `json:"heartbeat"`
	Token           string   `json:"token"`
	CORSOrigin      string   `json:"cors_origin"`
	CORSOrigins     []string `json:"cors_origins"`
	CORSCredentials *bool    `json:"cors_credentials"`
	MaxClients      *float64 `json:"max_clients"`
}

// Configure validates the config; it does not listen yet.
func (s *Sink) Configure(_ context.Context, setup pluginkit.Setup) error {
	var c config
	if err := pluginkit.DecodeConfig(setup.Config, &c); err != nil {
		return err
	}
	st, err := parseConfig(c)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.cfg = st
	s.mu.Unlock()
	return nil
}

func parseConfig(c config) (settings, error) {
	st := settings{listen: c.Listen, path: defaultPath, retention: defaultRetention, maxEvents: defaultMaxEvents, maxBytes: defaultMaxBytes,
		heartbeat: defaultHeartbeat, token: c.Token, maxClients: defaultClients}
	if c.Listen == "" {
		return st, &pluginkit.ConfigError{Field: "listen", Msg: `is required, for example "127.0.0.1:8090"`}
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return st, &pluginkit.ConfigError{Field: "listen", Msg: fmt.Sprintf("must be host:port: %v", err)}
	}
	if c.Path != "" {
		if !strings.HasPrefix(c.Path, "/") || strings.ContainsAny(c.Path, " ?#") {
			return st, &pluginkit.ConfigError{Field: "path", Msg: fmt.Sprintf("must be a URL path starting with /, not %q", c.Path)}
		}
		st.path = c.Path
	}
	duration := func(field, v string, into *time.Duration) error {
		if v == "" {
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return &pluginkit.ConfigError{Field: field, Msg: fmt.Sprintf("must be a positive duration such as \"1h\", not %q", v)}
		}
		*into = d
		return nil
	}
	if err := duration("retention", c.Retention, &st.retention); err != nil {
		return st, err
	}
	if err := duration("heartbeat", c.Heartbeat, &st.heartbeat); err != nil {
		return st, err
	}
	count := func(field string, v *float64, limit int, into *int) error {
		if v == nil {
			return nil
		}
		if *v < 1 || *v > float64(limit) || *v != float64(int(*v)) {
			return &pluginkit.ConfigError{Field: field, Msg: fmt.Sprintf("must be a whole number from 1 to %d, not %v", limit, *v)}
		}
		*into = int(*v)
		return nil
	}
	if err := count("retention_events", c.RetentionEvents, 10_000_000, &st.maxEvents); err != nil {
		return st, err
	}
	if err := count("max_clients", c.MaxClients, 1_000_000, &st.maxClients); err != nil {
		return st, err
	}
	mb := st.maxBytes >> 20
	if err := count("retention_mb", c.RetentionMB, 1<<20, &mb); err != nil {
		return st, err
	}
	st.maxBytes = mb << 20
	cs, err := parseCORS(c.CORSOrigin, c.CORSOrigins, c.CORSCredentials, c.Token)
	if err != nil {
		return st, err
	}
	st.cors = cs
	return st, nil
}

// Open starts the HTTP server. A port already taken fails the start of
// walcast with the address in the error.
func (s *Sink) Open(ctx context.Context) (pluginkit.OpenResult, error) {
	res, url, err := s.open()
	if err == nil && s.onOpen != nil {
		s.onOpen(url)
	}
	return res, err
}

func (s *Sink) open() (pluginkit.OpenResult, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.listen == "" {
		return pluginkit.OpenResult{}, "", pluginkit.Permanent(errors.New("open before configure"))
	}
	url := func() string { return "http://" + s.addr.String() + s.cfg.path }
	if s.srv != nil {
		return pluginkit.OpenResult{}, url(), nil
	}
	ln, err := net.Listen("tcp", s.cfg.listen)
	if err != nil {
		return pluginkit.OpenResult{}, "", pluginkit.Permanent(fmt.Errorf("sse: listen on %s: %w", s.cfg.listen, err))
	}
	s.ring = newRing(s.cfg.maxEvents, s.cfg.maxBytes, s.cfg.retention, s.now)
	s.done = make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc(s.cfg.path, s.serveStream)
	if !strings.HasSuffix(s.cfg.path, "/") {
		// <path>/<channel>: the channels of a sink with a route.
		mux.HandleFunc(s.cfg.path+"/", s.serveStream)
	}
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	s.addr = ln.Addr()
	go func(srv *http.Server) {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("sse server stopped", "err", err)
		}
	}(s.srv)
	s.log.Info("sse stream listening", "addr", ln.Addr().String(), "path", s.cfg.path,
		"retention", s.cfg.retention.String(), "retention_events", s.cfg.maxEvents, "retention_mb", s.cfg.maxBytes>>20)
	return pluginkit.OpenResult{}, url(), nil
}

// Deliver adds the batch to the retention window and wakes the clients;
// a gap before it becomes a gap marker the clients see. It never waits for
// a client. Events the window already moved past are reported as
// duplicates: a replay of parked events, older than what clients were
// sent, cannot join a stream they resume by id, so those stay parked.
func (s *Sink) Deliver(_ context.Context, b pluginkit.Batch) (pluginkit.DeliverResult, error) {
	s.mu.Lock()
	r := s.ring
	s.mu.Unlock()
	if r == nil {
		return pluginkit.DeliverResult{}, pluginkit.Permanent(errors.New("deliver before open"))
	}
	skipped := r.append(b.Events, b.GapBefore)
	return pluginkit.DeliverResult{Duplicates: skipped}, nil
}

// Close disconnects every client and stops the server. Clients are cut
// off rather than drained: they reconnect and resume with Last-Event-ID,
// and one that stopped reading must not hold walcast's shutdown.
func (s *Sink) Close(context.Context) error {
	s.mu.Lock()
	srv, done := s.srv, s.done
	s.srv, s.ring = nil, nil
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	close(done)
	if err := srv.Close(); err != nil {
		return fmt.Errorf("sse: stop server: %w", err)
	}
	return nil
}

// Addr is the address the server listens on (tests listen on port 0).
func (s *Sink) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// serveStream streams events to one client:
//
//	GET /events[/<channel>][?tables=public.orders,...][&ops=insert,update][&token=...]
//	Last-Event-ID: <id>   (or ?last_event_id=), to resume after that event
//
// Without Last-Event-ID the client gets events from now on. With a
// channel (or ?channel=) it gets only the events the sink's route sent
// there; /events itself streams every channel. Channels share one
// retention window, so resuming one is resuming the window filtered: an
// id the window moved past is a gap for that channel too, since events of
// it may have been among those that left.
func (s *Sink) serveStream(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	cfg, r, done := s.cfg, s.ring, s.done
	s.mu.Unlock()
	if r == nil {
		http.Error(w, "sse sink is not open", http.StatusServiceUnavailable)
		return
	}
	f, ok := admit(w, req, cfg)
	if !ok {
		return
	}
	last := lastEventID(req)
	c, gap := startAt(r, last)
	if n := s.clients.Add(1); n > int64(cfg.maxClients) {
		s.clients.Add(-1)
		http.Error(w, "too many clients", http.StatusServiceUnavailable)
		return
	}
	defer s.clients.Add(-1)

	out := openStream(w)
	if !out.write(fmt.Appendf(nil, "retry: %d\n\n", reconnectMillis)) {
		return
	}
	if gap != nil && !out.write(gapFrame(gap)) {
		return
	}
	if !out.flush() {
		return
	}
	heartbeat := time.NewTicker(cfg.heartbeat)
	defer heartbeat.Stop()
	out.follow(req.Context(), done, r, c, f, last, heartbeat.C)
}

// admit answers CORS preflights and refuses what may not open a stream
// (another method, a missing or wrong token, a malformed filter); ok says
// the request may go on, with its filter.
func admit(w http.ResponseWriter, req *http.Request, cfg settings) (f filter, ok bool) {
	if req.Method == http.MethodOptions {
		cfg.cors.preflight(w, req)
		return f, false
	}
	cfg.cors.headers(w, req)
	if req.Method != http.MethodGet {
		w.Header().Set("Allow", "GET, OPTIONS")
		http.Error(w, "use GET", http.StatusMethodNotAllowed)
		return f, false
	}
	if cfg.token != "" && !authorized(req, cfg.token) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="walcast"`)
		http.Error(w, "missing or wrong token", http.StatusUnauthorized)
		return f, false
	}
	f, err := parseFilter(req, cfg.path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return f, false
	}
	return f, true
}

// lastEventID is where the client asks to resume: the Last-Event-ID header
// an EventSource sends on reconnecting, or the last_event_id parameter a
// first connection can carry.
func lastEventID(req *http.Request) string {
	if last := req.Header.Get("Last-Event-ID"); last != "" {
		return last
	}
	return req.URL.Query().Get("last_event_id")
}

// startAt is the cursor a stream resuming after last starts from, and the
// gap to report first, if any; with no last it starts at the live end.
func startAt(r *ring, last string) (cursor, *gapInfo) {
	if last == "" {
		return r.live(), nil
	}
	if id, err := pluginkit.ParseEventID(last); err == nil {
		return r.resume(id)
	}
	// Not an id walcast wrote. A 400 would make a browser's EventSource
	// give up for good; an unknown position is a gap like an id from
	// before the window: the gap frame, then every retained event.
	return r.unknown(last)
}

// stream is one client's open response. Every write has a deadline, so a
// client that stopped reading is dropped instead of holding its handler.
type stream struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// openStream sends the headers of an event stream.
func openStream(w http.ResponseWriter) *stream {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	return &stream{w: w, rc: http.NewResponseController(w)}
}

func (o *stream) write(b []byte) bool {
	_ = o.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := o.w.Write(b)
	return err == nil
}

func (o *stream) flush() bool { return o.rc.Flush() == nil }

// follow writes the ring's events from c on, as they arrive, until the
// client goes (ctx), the sink closes (done) or a write fails; a ping on
// every heartbeat keeps proxies from closing an idle stream. lastSent is
// the id the client has, named by gap frames.
func (o *stream) follow(ctx context.Context, done <-chan struct{}, r *ring, c cursor, f filter, lastSent string, heartbeat <-chan time.Time) {
	for {
		events, after, missed, wake := r.read(c)
		if missed && !o.write(gapFrame(&gapInfo{Requested: lastSent, Oldest: r.oldest()})) {
			return
		}
		for _, e := range events {
			if e.gap {
				// walcast itself dropped events for this sink here.
				if !o.write(gapFrame(&gapInfo{Requested: lastSent, Oldest: idPtr(e.id)})) {
					return
				}
				continue
			}
			if !f.wants(e) {
				continue
			}
			if !o.write(e.frame) {
				return
			}
			lastSent = e.id.String()
		}
		c = after
		if (missed || len(events) > 0) && !o.flush() {
			return
		}
		select {
		case <-wake:
		case <-heartbeat:
			if !o.write([]byte(": ping\n\n")) || !o.flush() {
				return
			}
		case <-ctx.Done():
			return
		case <-done:
			return
		}
	}
}

func authorized(req *http.Request, token string) bool {
	got, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if !ok {
		got = req.URL.Query().Get("token")
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

// filter selects what one client receives.
type filter struct {
	tables map[string]bool
	ops    map[pluginkit.Op]bool
	// channel, when set, is the one route the client follows.
	channel *string
}

// parseFilter reads a client's filter: its channel from the path under
// base (or ?channel=), its tables and ops from the query.
func parseFilter(req *http.Request, base string) (filter, error) {
	var f filter
	q := req.URL.Query()
	channel, _ := strings.CutPrefix(req.URL.Path, strings.TrimSuffix(base, "/")+"/")
	if req.URL.Path == base {
		channel = ""
	}
	if v := q.Get("channel"); v != "" {
		if channel != "" && channel != v {
			return f, fmt.Errorf("channel: the path names %q and the query %q", channel, v)
		}
		channel = v
	}
	if channel != "" {
		f.channel = &channel
	}
	if v := q.Get("tables"); v != "" {
		f.tables = map[string]bool{}
		for _, t := range strings.Split(v, ",") {
			if !strings.Contains(t, ".") {
				return f, fmt.Errorf("tables: %q is not schema.table", t)
			}
			f.tables[t] = true
		}
	}
	if v := q.Get("ops"); v != "" {
		f.ops = map[pluginkit.Op]bool{}
		for _, o := range strings.Split(v, ",") {
			switch op := pluginkit.Op(o); op {
			case pluginkit.OpInsert, pluginkit.OpUpdate, pluginkit.OpDelete, pluginkit.OpTruncate, pluginkit.OpRead,
				pluginkit.OpSchema, pluginkit.OpResyncBegin, pluginkit.OpResyncEnd, pluginkit.OpMessage, pluginkit.OpDetach:
				f.ops[op] = true
			default:
				return f, fmt.Errorf("ops: %q is not insert, update, delete, truncate, read, schema, resync_begin, resync_end, message or detach", o)
			}
		}
	}
	return f, nil
}

func (f filter) wants(e stored) bool {
	return (f.tables == nil || f.tables[e.table]) && (f.ops == nil || f.ops[e.op]) &&
		(f.channel == nil || *f.channel == e.route)
}
