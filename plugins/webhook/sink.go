package main

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/pluginkit/cdc"
)

const (
	defaultTimeout    = 30 * time.Second
	defaultRetryAfter = 30 * time.Second
	// errorBodyBytes is how much of a failed response ends up in the error,
	// enough for a receiver's one-line explanation.
	errorBodyBytes = 200
	// drainBytes bounds how much of a response is read only so that the
	// connection can be reused.
	drainBytes = 64 << 10
)

// Sink delivers batches to one webhook URL.
type Sink struct {
	log *slog.Logger

	mu      sync.Mutex // guards the settings against Configure during Deliver
	cfg     settings
	client  *http.Client
	nowFunc func() time.Time // for tests; time.Now otherwise
}

// settings is the validated config.
type settings struct {
	url     *url.URL
	timeout time.Duration
	headers http.Header
	key     []byte // signing key; nil disables signing
	ceMode  string // how CloudEvents travel: structured, batch or binary
}

// Interface guards.
var _ pluginkit.BatchSink = (*Sink)(nil)

// New returns a webhook sink that logs through pluginkit.NewLogger.
func New() *Sink { return newSink(pluginkit.NewLogger()) }

func newSink(log *slog.Logger) *Sink { return &Sink{log: log, nowFunc: time.Now} }

// Info describes the sink.
func (s *Sink) Info() pluginkit.Info {
	return pluginkit.Info{
		Name:    "webhook",
		Version: pluginkit.BuildVersion(),
		Routes:  true, // the route is a path under url
		Config: []pluginkit.ConfigField{
			{Name: "url", Type: pluginkit.TypeString, Required: true, Doc: "The http or https URL each batch is POSTed to."},
			{Name: "timeout", Type: pluginkit.TypeDuration, Doc: `How long one POST may take, response included. Default "30s".`},
			{Name: "headers", Type: pluginkit.TypeStringMap, Doc: "Extra request headers, for example Authorization."},
			{Name: "secret", Type: pluginkit.TypeString, Doc: `Standard Webhooks signing secret: "whsec_" followed by base64, or raw bytes. Unset: requests are not signed.`},
			{Name: "cloudevents_mode", Type: pluginkit.TypeString, Doc: `With format = "cloudevents": "structured" (default, one request per event, application/cloudevents+json), "binary" (one request per event, attributes in ce-* headers, the envelope as body) or "batch" (one request per batch, application/cloudevents-batch+json).`},
		},
	}
}

type config struct {
	URL     string            `json:"url"`
	Timeout string            `json:"timeout"`
	Headers map[string]string `json:"headers"`
	Secret  string            `json:"secret"`
	CEMode  string            `json:"cloudevents_mode"`
}

// Configure validates the config; it makes no request.
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
	s.log.Info("webhook configured", "url", safeURL(st.url), "timeout", st.timeout.String(), "signed", st.key != nil)
	return nil
}

func parseConfig(c config) (settings, error) {
	var st settings
	if c.URL == "" {
		return st, &pluginkit.ConfigError{Field: "url", Msg: "is required"}
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		// Not err itself: a *url.Error repeats the whole URL, token and all.
		return st, &pluginkit.ConfigError{Field: "url", Msg: fmt.Sprintf("not a URL: %v", withoutURL(err))}
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return st, &pluginkit.ConfigError{Field: "url", Msg: fmt.Sprintf("scheme must be http or https, not %q", u.Scheme)}
	}
	if u.Host == "" {
		return st, &pluginkit.ConfigError{Field: "url", Msg: "has no host"}
	}
	st.url = u

	st.timeout = defaultTimeout
	if c.Timeout != "" {
		d, err := time.ParseDuration(c.Timeout)
		if err != nil || d <= 0 {
			return st, &pluginkit.ConfigError{Field: "timeout", Msg: fmt.Sprintf("must be a positive duration such as \"30s\", not %q", c.Timeout)}
		}
		st.timeout = d
	}

	st.headers = make(http.Header, len(c.Headers))
	for k, v := range c.Headers {
		if k == "" || strings.ContainsAny(k, " \t\r\n:") || strings.ContainsAny(v, "\r\n") {
			return st, &pluginkit.ConfigError{Field: "headers", Msg: fmt.Sprintf("invalid header %q", k)}
		}
		st.headers.Set(k, v)
	}

	if c.Secret != "" {
		st.key, err = signingKey(c.Secret)
		if err != nil {
			return st, &pluginkit.ConfigError{Field: "secret", Msg: err.Error()}
		}
	}
	switch st.ceMode = cmp.Or(c.CEMode, ceStructured); st.ceMode {
	case ceStructured, ceBinary, ceBatch:
	default:
		return st, &pluginkit.ConfigError{Field: "cloudevents_mode", Msg: fmt.Sprintf(`must be "structured", "binary" or "batch", not %q`, c.CEMode)}
	}
	return st, nil
}

// signingKey turns a configured secret into HMAC key bytes. Standard
// Webhooks secrets are "whsec_" followed by the base64 key; anything else is
// used as it is.
func signingKey(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		return []byte(secret), nil
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("the part after whsec_ must be base64: %v", err)
	}
	if len(key) == 0 {
		return nil, errors.New("is empty after whsec_")
	}
	return key, nil
}

// Open prepares the HTTP client; it does not contact the receiver, which
// may well be down while walcast starts.
func (s *Sink) Open(context.Context) (pluginkit.OpenResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.url == nil {
		return pluginkit.OpenResult{}, pluginkit.Permanent(errors.New("open before configure"))
	}
	s.client = &http.Client{
		Transport: http.DefaultTransport.(*http.Transport).Clone(),
		// Never follow a redirect: Go's client re-sends a 301, 302 or 303
		// as a GET without the body, and the 200 of that GET would count
		// as delivered; it re-sends a 307 or 308 with the body, the
		// signature and the configured headers to whatever host Location
		// names. The 3xx itself comes back and fails the attempt.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return pluginkit.OpenResult{}, nil
}

// Deliver POSTs the batch as one request (one per route, when the sink
// has a route expression), and the receiver answers for the batch as a
// whole: the sink never names single events. The body is
// assembled from the pre-encoded envelopes without decoding them again.
func (s *Sink) Deliver(ctx context.Context, b pluginkit.Batch) (pluginkit.DeliverResult, error) {
	events := b.Events
	if len(events) == 0 {
		return pluginkit.DeliverResult{}, nil
	}
	s.mu.Lock()
	cfg, client := s.cfg, s.client
	s.mu.Unlock()
	if client == nil {
		return pluginkit.DeliverResult{}, pluginkit.Permanent(errors.New("deliver before open"))
	}

	if cdc.IsCloudEvent(events[0].Payload) {
		// Routes are refused for formats other than walcast's envelope
		// (config), so a CloudEvents batch always goes to the url.
		if cfg.ceMode != ceBatch {
			return pluginkit.DeliverResult{}, s.deliverEach(ctx, cfg, client, events)
		}
		return pluginkit.DeliverResult{}, s.post(ctx, cfg, client, request{target: cfg.url, body: encodeBatch(events), id: batchID(events), contentType: ceBatchType})
	}
	if slices.ContainsFunc(events, func(e pluginkit.Event) bool { return len(e.Headers) > 0 }) {
		return pluginkit.DeliverResult{}, s.deliverOutbox(ctx, cfg, client, events)
	}
	return pluginkit.DeliverResult{}, s.deliverGroups(ctx, cfg, client, events)
}

// deliverGroups POSTs events as one request per route.
func (s *Sink) deliverGroups(ctx context.Context, cfg settings, client *http.Client, events []pluginkit.Event) error {
	groups, err := byRoute(cfg.url, events)
	if err != nil {
		return err
	}
	for _, g := range groups {
		r := request{target: g.target, body: encodeBody(g.events), id: batchID(g.events), contentType: "application/json"}
		if err := s.post(ctx, cfg, client, r); err != nil {
			return err
		}
	}
	return nil
}

// routeGroup is the events of a batch that go to one URL.
type routeGroup struct {
	target *url.URL
	events []pluginkit.Event
}

// byRoute splits a batch by the events' routes (the sink's route
// expression): an event with a route goes to the URL's path joined with
// it (url "https://h/hooks", route "orders/eu": https://h/hooks/orders/eu),
// one without to the URL. Groups are POSTed in the order their first event
// comes, and keep their events' order. A route that would leave the
// URL's path ("..") is refused: the event is parked with the reason.
func byRoute(base *url.URL, events []pluginkit.Event) ([]routeGroup, error) {
	if !slices.ContainsFunc(events, func(e pluginkit.Event) bool { return e.Route != "" }) {
		return []routeGroup{{target: base, events: events}}, nil
	}
	var groups []routeGroup
	at := map[string]int{}
	for _, e := range events {
		i, ok := at[e.Route]
		if !ok {
			target := base
			if e.Route != "" {
				if slices.Contains(strings.Split(e.Route, "/"), "..") {
					return nil, pluginkit.Permanent(fmt.Errorf("event %s: route %q climbs out of the url's path: fix the sink's route expression", e.ID, e.Route))
				}
				target = base.JoinPath(e.Route)
			}
			i = len(groups)
			at[e.Route] = i
			groups = append(groups, routeGroup{target: target})
		}
		groups[i].events = append(groups[i].events, e)
	}
	return groups, nil
}

// request is one POST: where it goes, its body, its Standard Webhooks id,
// and its content type and extra headers.
type request struct {
	target      *url.URL
	body        net.Buffers
	id          string
	contentType string
	header      http.Header
}

// post sends one request and classifies the answer.
func (s *Sink) post(ctx context.Context, cfg settings, client *http.Client, r request) error {
	target := r.target
	if target == nil {
		target = cfg.url
	}
	size := bodySize(r.body)
	ts := strconv.FormatInt(s.nowFunc().Unix(), 10)
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target.String(), http.NoBody)
	if err != nil {
		return pluginkit.Permanent(fmt.Errorf("build request: %w", err))
	}
	// The body is written from the events' own bytes, never copied into
	// one buffer: with large batches and many lanes that copy was most
	// of this process's memory.
	req.Body, req.ContentLength = bodyReader(r.body), size
	req.GetBody = func() (io.ReadCloser, error) { return bodyReader(r.body), nil }
	req.Header = cfg.headers.Clone()
	for k, v := range r.header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", r.contentType)
	// The id names this exact body: a redelivery of the same events
	// carries the same id, a batch cut differently never does.
	req.Header.Set("Idempotency-Key", r.id)
	req.Header.Set("Webhook-Id", r.id)
	req.Header.Set("Webhook-Timestamp", ts)
	if cfg.key != nil {
		req.Header.Set("Webhook-Signature", sign(cfg.key, r.id, ts, r.body))
	}

	resp, err := client.Do(req)
	if err != nil {
		return pluginkit.Retryable(fmt.Errorf("POST %s: %w", safeURL(target), withoutURL(err)))
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainBytes))
		return nil
	}

	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyBytes))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainBytes))
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return pluginkit.Retryable(redirectError(target, resp))
	}
	err = fmt.Errorf("POST %s: %s: %q", safeURL(target), resp.Status, snippet)
	return s.classify(resp, err, size)
}

// redirectError describes a 3xx answer, which never delivers: the batch
// was not taken where url points, and it is not sent on to Location
// either (see Open). It names the status and where Location points, as
// scheme and host only, like every URL this sink shows.
func redirectError(target *url.URL, resp *http.Response) error {
	where := "no Location header"
	if loc := resp.Header.Get("Location"); loc != "" {
		where = "an unreadable Location header"
		if u, err := target.Parse(loc); err == nil && u.Host != "" {
			where = "Location " + safeURL(u)
			if u.Scheme == target.Scheme && u.Host == target.Host {
				if u.RequestURI() == target.RequestURI() {
					where += " (the same URL)"
				} else {
					where += " (the same host, another path or query)"
				}
			}
		}
	}
	return fmt.Errorf("POST %s: %s with %s: walcast never follows a redirect, so nothing was delivered; set url to the address that answers the POST itself with 2xx",
		safeURL(target), resp.Status, where)
}

// withoutURL returns the cause a *url.Error wraps, so that the URL it
// repeats in full (net/http's and url.Parse's errors are *url.Errors) never
// reaches an error text; any other error is returned as it is.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// safeURL is how this sink shows a URL anywhere (logs, errors): scheme and
// host only. The path and the query often hold the credential (Slack-style
// hook paths, ?token=), and user:password@ certainly does.
func safeURL(u *url.URL) string { return u.Scheme + "://" + u.Host }

// classify maps a non-2xx answer to an error kind, following the Standard
// Webhooks operational advice:
//   - 429, and 503 with a Retry-After header: the receiver asks to slow
//     down; the sink pauses and the attempt is not counted;
//   - 410 Gone: the endpoint was removed on purpose; retrying cannot help,
//     and parking event after event would only hide it, so the sink stops
//     (fatal) until someone points it at a live URL;
//   - 413: the receiver's size limit; permanent (see below);
//   - anything else (503 without Retry-After included): a failed attempt.
func (s *Sink) classify(resp *http.Response, err error, size int64) error {
	ra := resp.Header.Get("Retry-After")
	switch {
	case resp.StatusCode == http.StatusTooManyRequests,
		resp.StatusCode == http.StatusServiceUnavailable && strings.TrimSpace(ra) != "":
		after := retryAfter(ra, s.nowFunc())
		s.log.Debug("webhook throttled", "status", resp.StatusCode, "retry_after", after.String())
		return pluginkit.Throttled(after, err)
	case resp.StatusCode == http.StatusGone:
		s.log.Error("webhook endpoint is gone (410): this sink stops delivering; point url at a live endpoint and restart", "err", err)
		return pluginkit.Fatal(fmt.Errorf("endpoint gone (410 Gone), delivery to this sink stopped: %w", err))
	case resp.StatusCode == http.StatusRequestEntityTooLarge:
		// The receiver's own size limit: the same request fails the same
		// way every time. Permanent, so the host splits the batch and
		// parks the event that is too large on its own at once.
		return pluginkit.Permanent(fmt.Errorf("%w (the receiver refuses a request of %d bytes; raise its body size limit to deliver it)", err, size))
	}
	return pluginkit.Retryable(err)
}

// Close releases idle connections.
func (s *Sink) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != nil {
		s.client.CloseIdleConnections()
		s.client = nil
	}
	return nil
}

// encodeBody lays out {"events":[p1,p2,...]} as the pieces of the body,
// pointing at the payloads instead of copying them.
func encodeBody(events []pluginkit.Event) net.Buffers {
	return joinPayloads(events, []byte(`{"events":[`), []byte("]}"))
}

// joinPayloads lays out open, the payloads separated by commas, and end.
func joinPayloads(events []pluginkit.Event, open, end []byte) net.Buffers {
	b := make(net.Buffers, 0, 2*len(events)+1)
	b = append(b, open)
	for i, e := range events {
		if i > 0 {
			b = append(b, comma)
		}
		b = append(b, e.Payload)
	}
	return append(b, end)
}

var comma = []byte{','}

func bodySize(b net.Buffers) int64 {
	n := 0
	for _, p := range b {
		n += len(p)
	}
	return int64(n)
}

// bodyReader reads the pieces from the start; net.Buffers consumes the
// slice it reads from, so each reader gets its own copy of the headers.
func bodyReader(b net.Buffers) io.ReadCloser {
	c := slices.Clone(b)
	return io.NopCloser(&c)
}

// batchID names the exact list of events in a batch, which is what the
// body is: "wc1_" and the first 128 bits of the SHA-256 of the event ids,
// in order, one per line, in hex. Event ids are derived from the WAL, so a
// redelivery of the same events gets the same id; a batch re-cut after a
// split or a restart holds a different list and gets a different id, so a
// receiver deduplicating on webhook-id (as the Standard Webhooks spec
// advises) never drops an event it has not seen.
func batchID(events []pluginkit.Event) string {
	h := sha256.New()
	var buf []byte
	for _, e := range events {
		buf, _ = e.ID.AppendText(buf[:0]) // never fails
		buf = append(buf, '\n')
		h.Write(buf)
	}
	return "wc1_" + hex.EncodeToString(h.Sum(nil)[:16])
}

// sign computes the Standard Webhooks signature header value.
func sign(key []byte, id, ts string, body net.Buffers) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	for _, p := range body {
		mac.Write(p)
	}
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// retryAfter reads a Retry-After header: delay seconds or an HTTP date.
// Absent or unreadable means defaultRetryAfter; a date in the past means no
// pause.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return defaultRetryAfter
	}
	if secs, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return defaultRetryAfter
}
