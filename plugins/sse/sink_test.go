package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/pluginkit/sinktest"
)

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// frame is one parsed server-sent event.
type frame struct {
	ID, Event, Data string
}

// client is a real SSE client over HTTP: it parses the stream the way
// browsers do (fields up to a blank line; comments ignored).
type client struct {
	t      *testing.T
	resp   *http.Response
	frames chan frame
}

func dial(t *testing.T, url string, header http.Header) *client {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET %s: %s %s", url, resp.Status, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	c := &client{t: t, resp: resp, frames: make(chan frame, 100000)}
	go c.readLoop()
	t.Cleanup(func() { resp.Body.Close() })
	return c
}

func (c *client) readLoop() {
	defer close(c.frames)
	sc := bufio.NewScanner(c.resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var f frame
	var data []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data != nil {
				f.Data = strings.Join(data, "\n")
				c.frames <- f
			}
			f, data = frame{}, nil
		case strings.HasPrefix(line, ":"):
		default:
			name, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch name {
			case "id":
				f.ID = value
			case "event":
				f.Event = value
			case "data":
				data = append(data, value)
			}
		}
	}
}

// next waits for the next frame.
func (c *client) next() frame {
	c.t.Helper()
	select {
	case f, ok := <-c.frames:
		if !ok {
			c.t.Fatal("stream ended")
		}
		return f
	case <-time.After(5 * time.Second):
		c.t.Fatal("no frame within 5s")
	}
	return frame{}
}

// none checks that no frame arrives for a moment.
func (c *client) none() {
	c.t.Helper()
	select {
	case f := <-c.frames:
		c.t.Fatalf("unexpected frame %+v", f)
	case <-time.After(200 * time.Millisecond):
	}
}

func events(lsn uint64, n int, table string) []pluginkit.Event {
	out := make([]pluginkit.Event, n)
	for i := range out {
		id := pluginkit.EventID{CommitLSN: lsn, Index: uint64(i)}
		out[i] = pluginkit.Event{ID: id, Schema: "public", Table: table, Op: pluginkit.OpInsert,
			Key: fmt.Appendf(nil, `{"id":%d}`, i), Payload: fmt.Appendf(nil, `{"id":%q,"table":%q}`, id, table)}
	}
	return out
}

func open(t *testing.T, cfg map[string]any) (*Sink, string) {
	t.Helper()
	if cfg["listen"] == nil {
		cfg["listen"] = "127.0.0.1:0"
	}
	raw, _ := json.Marshal(cfg)
	s := newSink(discardLogger())
	ctx := context.Background()
	if err := s.Configure(ctx, pluginkit.Setup{Config: raw}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	path := defaultPath
	if p, ok := cfg["path"].(string); ok {
		path = p
	}
	return s, "http://" + s.Addr().String() + path
}

func deliver(t *testing.T, s *Sink, evs []pluginkit.Event) {
	t.Helper()
	deliverBatch(t, s, pluginkit.Batch{Events: evs})
}

func deliverBatch(t *testing.T, s *Sink, b pluginkit.Batch) {
	t.Helper()
	if _, err := s.Deliver(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

func TestLiveStreamAndFilters(t *testing.T) {
	s, url := open(t, map[string]any{})
	all := dial(t, url, nil)
	orders := dial(t, url+"?tables=public.orders&ops=insert", nil)
	deliver(t, s, events(0x10, 2, "orders"))
	deliver(t, s, events(0x20, 1, "customers"))
	for i, want := range []string{"0/10:0", "0/10:1", "0/20:0"} {
		f := all.next()
		if f.ID != want || f.Event != "change" {
			t.Fatalf("frame %d: %+v, want id %s event change", i, f, want)
		}
		var env map[string]string
		if err := json.Unmarshal([]byte(f.Data), &env); err != nil || env["id"] != want {
			t.Fatalf("frame %d data %q is not the envelope of %s", i, f.Data, want)
		}
	}
	if f1, f2 := orders.next(), orders.next(); f1.ID != "0/10:0" || f2.ID != "0/10:1" {
		t.Fatalf("filtered client got %+v %+v", f1, f2)
	}
	orders.none()
}

func TestResumeWithinTheWindow(t *testing.T) {
	s, url := open(t, map[string]any{})
	deliver(t, s, events(0x10, 3, "t"))
	deliver(t, s, events(0x20, 2, "t"))
	c := dial(t, url, http.Header{"Last-Event-ID": {"0/10:1"}})
	for _, want := range []string{"0/10:2", "0/20:0", "0/20:1"} {
		if f := c.next(); f.ID != want || f.Event != "change" {
			t.Fatalf("got %+v, want %s", f, want)
		}
	}
	c.none()
	deliver(t, s, events(0x30, 1, "t"))
	if f := c.next(); f.ID != "0/30:0" {
		t.Fatalf("live event after resume: %+v", f)
	}
	// The query parameter works like the header (EventSource polyfills).
	q := dial(t, url+"?last_event_id=0/20:1", nil)
	if f := q.next(); f.ID != "0/30:0" {
		t.Fatalf("resume by query: %+v", f)
	}
}

func TestGapWhenTheWindowMovedOn(t *testing.T) {
	s, url := open(t, map[string]any{"retention_events": 3})
	deliver(t, s, events(0x10, 5, "t")) // keeps 0/10:2..4, evicts 0..1
	c := dial(t, url, http.Header{"Last-Event-ID": {"0/10:0"}})
	f := c.next()
	var g gapInfo
	if f.Event != "gap" || json.Unmarshal([]byte(f.Data), &g) != nil || g.Requested != "0/10:0" || g.Oldest == nil || *g.Oldest != "0/10:2" {
		t.Fatalf("want a gap from 0/10:0 to 0/10:2, got %+v", f)
	}
	for _, want := range []string{"0/10:2", "0/10:3", "0/10:4"} {
		if f := c.next(); f.ID != want {
			t.Fatalf("after the gap got %+v, want %s", f, want)
		}
	}
	// Resuming at the newest evicted event misses nothing: no gap.
	exact := dial(t, url, http.Header{"Last-Event-ID": {"0/10:1"}})
	if f := exact.next(); f.Event != "change" || f.ID != "0/10:2" {
		t.Fatalf("resume at the last evicted event: %+v", f)
	}
	// An id from before this process saw anything: a gap, never silence.
	s2, url2 := open(t, map[string]any{})
	deliver(t, s2, events(0x50, 1, "t"))
	old := dial(t, url2, http.Header{"Last-Event-ID": {"0/40:7"}})
	if f := old.next(); f.Event != "gap" {
		t.Fatalf("resume from before the window: %+v, want a gap", f)
	}
}

// When walcast dropped events for the sink (its queue was full), live and
// resuming clients get a gap frame at that point, never a silent hole.
func TestGapWhenWalcastDropped(t *testing.T) {
	s, url := open(t, map[string]any{})
	live := dial(t, url, nil)
	deliver(t, s, events(0x10, 1, "t"))
	deliverBatch(t, s, pluginkit.Batch{Events: events(0x30, 1, "t"), GapBefore: true})
	if f := live.next(); f.ID != "0/10:0" {
		t.Fatalf("got %+v", f)
	}
	f := live.next()
	var g gapInfo
	if f.Event != "gap" || json.Unmarshal([]byte(f.Data), &g) != nil || g.Requested != "0/10:0" || g.Oldest == nil || *g.Oldest != "0/30:0" {
		t.Fatalf("want a gap between 0/10:0 and 0/30:0, got %+v", f)
	}
	if f := live.next(); f.ID != "0/30:0" {
		t.Fatalf("after the gap: %+v", f)
	}
	resumed := dial(t, url, http.Header{"Last-Event-ID": {"0/10:0"}})
	if f := resumed.next(); f.Event != "gap" {
		t.Fatalf("resume across the hole: %+v, want the gap first", f)
	}
	if f := resumed.next(); f.ID != "0/30:0" {
		t.Fatalf("resume after the gap: %+v", f)
	}
	after := dial(t, url, http.Header{"Last-Event-ID": {"0/30:0"}})
	after.none()
}

// The window is bounded in bytes too: large rows cannot exhaust memory.
func TestRetentionByBytes(t *testing.T) {
	s, url := open(t, map[string]any{"retention_mb": 1})
	big := events(0x10, 30, "t")
	for i := range big {
		big[i].Payload = []byte(`{"pad":"` + strings.Repeat("x", 100<<10) + `"}`) // 100 KiB each
	}
	deliver(t, s, big)
	s.ring.mu.Lock()
	n, bytes := len(s.ring.buf), s.ring.bytes
	s.ring.mu.Unlock()
	if bytes > 1<<20 || n < 5 || n > 10 {
		t.Fatalf("window holds %d events, %d bytes; want about 1 MiB worth (at most 10)", n, bytes)
	}
	c := dial(t, url, http.Header{"Last-Event-ID": {"0/10:0"}})
	if f := c.next(); f.Event != "gap" {
		t.Fatalf("resume from an event evicted by size: %+v, want a gap", f)
	}
}

func TestRetentionByAge(t *testing.T) {
	s, url := open(t, map[string]any{"retention": "1h"})
	var mu sync.Mutex
	now := time.Now()
	s.ring.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	deliver(t, s, events(0x10, 2, "t"))
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	deliver(t, s, events(0x20, 1, "t"))
	c := dial(t, url, http.Header{"Last-Event-ID": {"0/10:0"}})
	if f := c.next(); f.Event != "gap" {
		t.Fatalf("event older than retention still resumable: %+v", f)
	}
	if f := c.next(); f.ID != "0/20:0" {
		t.Fatalf("got %+v", f)
	}
}

// A client that stops reading must not slow Deliver down.
func TestStalledClientDoesNotBlockDeliver(t *testing.T) {
	s, url := open(t, map[string]any{"retention_events": 1000})
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req) // never read
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	big := make([]pluginkit.Event, 100)
	payload := []byte(`{"pad":"` + strings.Repeat("x", 10000) + `"}`)
	start := time.Now()
	for b := range 200 { // 200 MB through a client that reads nothing
		evs := events(uint64(0x100+b), len(big), "t")
		for i := range evs {
			evs[i].Payload = payload
		}
		deliver(t, s, evs)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("200 batches took %s with a stalled client", d)
	}
}

func TestDuplicatesAreSkipped(t *testing.T) {
	s, url := open(t, map[string]any{})
	c := dial(t, url, nil)
	deliver(t, s, events(0x10, 2, "t"))
	deliver(t, s, events(0x10, 2, "t")) // the host retried the batch
	deliver(t, s, events(0x20, 1, "t"))
	for _, want := range []string{"0/10:0", "0/10:1", "0/20:0"} {
		if f := c.next(); f.ID != want {
			t.Fatalf("got %+v, want %s", f, want)
		}
	}
	c.none()
}

// Events the window moved past are reported as duplicates, replayed or
// not: the host then keeps replayed ones parked rather than unparking
// events no client was sent.
func TestSkippedEventsAreDuplicates(t *testing.T) {
	s, _ := open(t, map[string]any{})
	deliver(t, s, events(0x20, 2, "t"))
	for _, replay := range []bool{false, true} {
		res, err := s.Deliver(context.Background(), pluginkit.Batch{Events: events(0x10, 3, "t"), Replay: replay})
		if err != nil || res.Duplicates != 3 {
			t.Errorf("older events (replay %v): %+v, %v; want 3 duplicates", replay, res, err)
		}
	}
}

func TestAuthAndBadRequests(t *testing.T) {
	_, url := open(t, map[string]any{"token": "s3cret", "cors_origin": "https://app.example.com"})
	get := func(u string, h http.Header) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		req.Header = h
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	if r := get(url, nil); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %s", r.Status)
	}
	if r := get(url+"?token=wrong", nil); r.StatusCode != http.StatusUnauthorized {
		t.Fatalf("wrong token: %s", r.Status)
	}
	if r := get(url+"?token=s3cret", http.Header{"Origin": {"https://app.example.com"}}); r.StatusCode != http.StatusOK || r.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Fatalf("token in query: %s, CORS %q", r.Status, r.Header.Get("Access-Control-Allow-Origin"))
	}
	if r := get(url, http.Header{"Authorization": {"Bearer s3cret"}}); r.StatusCode != http.StatusOK {
		t.Fatalf("bearer token: %s", r.Status)
	}
	if r := get(url+"?token=s3cret&ops=upsert", nil); r.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad ops: %s", r.Status)
	}
}

func TestMaxClients(t *testing.T) {
	_, url := open(t, map[string]any{"max_clients": 1})
	dial(t, url, nil)
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("second client: %s, want 503", resp.Status)
	}
}

func TestPortTakenFailsOpen(t *testing.T) {
	s, _ := open(t, map[string]any{})
	raw, _ := json.Marshal(map[string]any{"listen": s.Addr().String()})
	other := newSink(discardLogger())
	if err := other.Configure(context.Background(), pluginkit.Setup{Config: raw}); err != nil {
		t.Fatal(err)
	}
	_, err := other.Open(context.Background())
	if k, _ := pluginkit.KindOf(err); err == nil || k != pluginkit.KindPermanent || !strings.Contains(err.Error(), s.Addr().String()) {
		t.Fatalf("Open on a taken port: %v", err)
	}
}

// TestConformance runs pluginkit/sinktest. What "arrived" is what a client
// connected from the start received.
func TestConformance(t *testing.T) {
	var mu sync.Mutex
	var got [][]byte
	sinktest.Run(t, sinktest.Config{
		NewBatch: func() pluginkit.BatchSink {
			s := newSink(discardLogger())
			s.onOpen = func(url string) {
				c := dialQuiet(url)
				if c == nil {
					return
				}
				go func() {
					for f := range c {
						mu.Lock()
						got = append(got, []byte(f.Data))
						mu.Unlock()
					}
				}()
			}
			return s
		},
		Config: json.RawMessage(`{"listen":"127.0.0.1:0","retention_events":100000}`),
		// Clients resume by id, so the window only grows in id order:
		// replayed (older) events are reported as duplicates and stay
		// parked instead of being written.
		Skip: []string{"Deliver/Batches/Replay"},
		InvalidConfigs: []sinktest.InvalidConfig{
			{Name: "listen without port", Config: json.RawMessage(`{"listen":"localhost"}`), Field: "listen"},
			{Name: "relative path", Config: json.RawMessage(`{"listen":"127.0.0.1:0","path":"events"}`), Field: "path"},
			{Name: "zero retention", Config: json.RawMessage(`{"listen":"127.0.0.1:0","retention":"0s"}`), Field: "retention"},
			{Name: "fractional retention_events", Config: json.RawMessage(`{"listen":"127.0.0.1:0","retention_events":1.5}`), Field: "retention_events"},
		},
		Received: func() [][]byte {
			mu.Lock()
			defer mu.Unlock()
			return append([][]byte(nil), got...)
		},
	})
}

// dialQuiet connects a client outside any test's lifetime and returns its
// frames.
func dialQuiet(url string) <-chan frame {
	resp, err := http.Get(url)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil
	}
	c := &client{resp: resp, frames: make(chan frame, 100000)}
	go c.readLoop()
	return c.frames
}

// routed returns events like events, each sent to the channel route(i).
func routed(lsn uint64, n int, route func(i int) string) []pluginkit.Event {
	evs := events(lsn, n, "t")
	for i := range evs {
		evs[i].Route = route(i)
	}
	return evs
}

// With a route, <path>/<channel> (or ?channel=) streams one channel, the
// bare path every channel, and resuming a channel by Last-Event-ID gives
// that channel's retained events after it, with a gap when the shared
// window moved past it.
func TestChannels(t *testing.T) {
	s, url := open(t, map[string]any{"retention_events": 6})
	if !s.Info().Routes {
		t.Fatal("Info.Routes is false: the host would refuse a route on the sse sink")
	}
	byParity := func(i int) string { return []string{"even", "odd/x"}[i%2] }
	even, odd, all := dial(t, url+"/even", nil), dial(t, url+"?channel=odd/x", nil), dial(t, url, nil)
	oddPath := dial(t, url+"/odd/x", nil)
	deliver(t, s, routed(0x10, 4, byParity))
	for _, c := range []struct {
		name string
		cl   *client
		want []string
	}{
		{"even", even, []string{"0/10:0", "0/10:2"}},
		{"odd by query", odd, []string{"0/10:1", "0/10:3"}},
		{"odd by path", oddPath, []string{"0/10:1", "0/10:3"}},
		{"all", all, []string{"0/10:0", "0/10:1", "0/10:2", "0/10:3"}},
	} {
		for _, want := range c.want {
			if f := c.cl.next(); f.ID != want || f.Event != "change" {
				t.Fatalf("%s: got %+v, want %s", c.name, f, want)
			}
		}
		c.cl.none()
	}

	// Resume within the window: only the channel's later events.
	deliver(t, s, routed(0x20, 2, byParity)) // window: 0/10:0 .. 0/20:1
	resumed := dial(t, url+"/even", http.Header{"Last-Event-ID": {"0/10:0"}})
	for _, want := range []string{"0/10:2", "0/20:0"} {
		if f := resumed.next(); f.ID != want {
			t.Fatalf("resumed even: got %+v, want %s", f, want)
		}
	}
	resumed.none()

	// The window (6 events, every channel) moves past 0/10:0 and 0/10:1:
	// an even client resuming at 0/10:0 gets a gap, then its events.
	deliver(t, s, routed(0x30, 2, byParity))
	late := dial(t, url+"/even", http.Header{"Last-Event-ID": {"0/10:0"}})
	f := late.next()
	var g gapInfo
	if f.Event != "gap" || json.Unmarshal([]byte(f.Data), &g) != nil || g.Requested != "0/10:0" || g.Oldest == nil || *g.Oldest != "0/10:2" {
		t.Fatalf("want a gap from 0/10:0 to 0/10:2, got %+v", f)
	}
	for _, want := range []string{"0/10:2", "0/20:0", "0/30:0"} {
		if f := late.next(); f.ID != want {
			t.Fatalf("after the gap: got %+v, want %s", f, want)
		}
	}
	late.none()

	bad, err := http.Get(url + "/even?channel=odd")
	if err != nil {
		t.Fatal(err)
	}
	bad.Body.Close()
	if bad.StatusCode != http.StatusBadRequest {
		t.Fatalf("two different channels: %s, want 400", bad.Status)
	}
}
