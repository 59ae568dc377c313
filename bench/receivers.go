package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// What the benchmark's sinks deliver to: webhook receivers that count
// events and time them, and the counter of a stdout sink's FIFO.

// receiver is a minimal webhook endpoint: it counts the events of each
// POST, and with latency set records commit time → arrival per event.
type receiver struct {
	url    string
	srv    *http.Server
	events atomic.Int64
	target atomic.Int64
	done   chan time.Time

	latency bool
	mu      sync.Mutex
	lat     []time.Duration
	commit  []time.Time // each event's commit time, in step with lat
}

var eventMark = []byte(`{"id":"`)

func startReceiver(latency bool) (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{url: "http://" + ln.Addr().String() + "/hook", done: make(chan time.Time, 1), latency: latency}
	r.target.Store(-1)
	buf := sync.Pool{New: func() any { return new(bytes.Buffer) }}
	r.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b := buf.Get().(*bytes.Buffer)
		b.Reset()
		defer buf.Put(b)
		if _, err := b.ReadFrom(req.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		now := time.Now()
		n := int64(bytes.Count(b.Bytes(), eventMark))
		if r.latency {
			var body struct {
				Events []struct {
					CommitTime time.Time `json:"commit_time"`
				} `json:"events"`
			}
			if err := json.Unmarshal(b.Bytes(), &body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.mu.Lock()
			for _, ev := range body.Events {
				r.lat = append(r.lat, now.Sub(ev.CommitTime))
				r.commit = append(r.commit, ev.CommitTime)
			}
			r.mu.Unlock()
		}
		total := r.events.Add(n)
		if t := r.target.Load(); t >= 0 && total >= t && total-n < t {
			r.done <- now
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	go r.srv.Serve(ln)
	return r, nil
}

// wait returns when the receiver has counted n events.
func (r *receiver) wait(n int64, exited <-chan struct{}, timeout time.Duration) (time.Time, error) {
	r.target.Store(n)
	if r.events.Load() >= n {
		return time.Now(), nil
	}
	select {
	case t := <-r.done:
		return t, nil
	case <-exited:
		return time.Time{}, fmt.Errorf("the daemon exited after %d of %d events", r.events.Load(), n)
	case <-time.After(timeout):
		return time.Time{}, fmt.Errorf("%d of %d events arrived within %s", r.events.Load(), n, timeout)
	}
}

func (r *receiver) close() { r.srv.Close() }

// arrived is what a latency receiver recorded: each event's commit time
// and its commit → arrival latency.
func (r *receiver) arrived() ([]time.Time, []time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.commit), slices.Clone(r.lat)
}

func (r *receiver) count() int64 { return r.events.Load() }

// isoReceiver is a webhook endpoint that can go down (connection refused)
// and come back on the same address, answer after a delay or hold every
// request until released, record each event's commit → arrival latency,
// and count distinct events.
type isoReceiver struct {
	delay    time.Duration
	latency  bool
	url      string
	addr     string
	events   atomic.Int64
	distinct map[string]bool // nil: not counted

	mu     sync.Mutex
	srv    *http.Server
	held   chan struct{} // while open, requests wait (hold, release)
	commit []time.Time
	lat    []time.Duration
	ok     []time.Time // when each request was answered
	target int64
	done   chan time.Time
}

func newIsoReceiver(delay time.Duration) *isoReceiver {
	return &isoReceiver{delay: delay, done: make(chan time.Time, 1), target: -1}
}

// up listens on addr ("" for a new port).
func (r *isoReceiver) up(addr string) error {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	r.addr = ln.Addr().String()
	r.url = "http://" + r.addr + "/hook"
	srv := &http.Server{Handler: http.HandlerFunc(r.serve)}
	r.mu.Lock()
	r.srv = srv
	r.mu.Unlock()
	go srv.Serve(ln)
	return nil
}

// hold makes requests wait, unanswered, until release.
func (r *isoReceiver) hold() {
	r.mu.Lock()
	r.held = make(chan struct{})
	r.mu.Unlock()
}

// release answers the held requests and those that follow.
func (r *isoReceiver) release() {
	r.mu.Lock()
	if r.held != nil {
		close(r.held)
		r.held = nil
	}
	r.mu.Unlock()
}

// down closes the listener and every connection: requests are refused.
func (r *isoReceiver) down() {
	r.mu.Lock()
	srv := r.srv
	r.srv = nil
	r.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

func (r *isoReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !r.due(req) {
		return
	}
	now := time.Now()
	var n int64
	if r.latency || r.distinct != nil {
		var b struct {
			Events []struct {
				ID         string    `json:"id"`
				CommitTime time.Time `json:"commit_time"`
			} `json:"events"`
		}
		if err := json.Unmarshal(body, &b); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n = int64(len(b.Events))
		r.mu.Lock()
		for _, ev := range b.Events {
			if r.latency {
				r.commit = append(r.commit, ev.CommitTime)
				r.lat = append(r.lat, now.Sub(ev.CommitTime))
			}
			if r.distinct != nil {
				r.distinct[ev.ID] = true
			}
		}
		r.mu.Unlock()
	} else {
		n = int64(bytes.Count(body, eventMark))
	}
	total := r.events.Add(n)
	r.mu.Lock()
	r.ok = append(r.ok, now)
	if t := r.target; t >= 0 && total >= t && total-n < t {
		r.done <- now
	}
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// due waits out the delay and any hold; false when the client gave up
// first.
func (r *isoReceiver) due(req *http.Request) bool {
	if r.delay > 0 {
		select {
		case <-time.After(r.delay):
		case <-req.Context().Done():
			return false
		}
	}
	r.mu.Lock()
	held := r.held
	r.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-req.Context().Done():
			return false
		}
	}
	return true
}

// wait returns when n events arrived.
func (r *isoReceiver) wait(n int64, exited <-chan struct{}, timeout time.Duration) (time.Time, error) {
	r.mu.Lock()
	r.target = n
	r.mu.Unlock()
	if r.events.Load() >= n {
		return time.Now(), nil
	}
	select {
	case t := <-r.done:
		return t, nil
	case <-exited:
		return time.Time{}, fmt.Errorf("the daemon exited after %d of %d events", r.events.Load(), n)
	case <-time.After(timeout):
		return time.Time{}, fmt.Errorf("%d of %d events arrived within %s", r.events.Load(), n, timeout)
	}
}

func (r *isoReceiver) distinctCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.distinct)
}

// waitDistinct polls until n distinct events arrived.
func (r *isoReceiver) waitDistinct(n int, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for r.distinctCount() < n {
		select {
		case <-exited:
			return fmt.Errorf("the daemon exited after %d of %d distinct events", r.distinctCount(), n)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d distinct events arrived within %s", r.distinctCount(), n, timeout)
		}
	}
	return nil
}

// latencies returns the latencies of the events committed in [from, to).
func (r *isoReceiver) latencies(from, to time.Time) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Duration
	for i, c := range r.commit {
		if !c.Before(from) && c.Before(to) {
			out = append(out, r.lat[i])
		}
	}
	return out
}

// firstAfter is when the first request after t succeeded (zero if none).
func (r *isoReceiver) firstAfter(t time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.ok {
		if a.After(t) {
			return a
		}
	}
	return time.Time{}
}

// lineCounter counts the events the stdout sink writes into a FIFO.
type lineCounter struct {
	n      atomic.Int64
	mu     sync.Mutex
	target int64
	at     time.Time
	done   chan struct{}
	// last is when events last arrived; maxGap the longest wait for more
	// before the target was reached: the longest the sink was held up.
	last   time.Time
	maxGap time.Duration
}

func (c *lineCounter) count(f *os.File) {
	buf := make([]byte, 1<<20)
	// A mark may straddle two reads: each read is counted together with
	// the previous one's last len(mark)-1 bytes, too short to hold a mark
	// by themselves, so none is counted twice.
	var chunk []byte
	keep := len(eventMark) - 1
	for {
		k, err := f.Read(buf)
		if k > 0 {
			chunk = append(chunk, buf[:k]...)
			c.add(int64(bytes.Count(chunk, eventMark)))
			chunk = append(chunk[:0], chunk[max(len(chunk)-keep, 0):]...)
		}
		if err != nil {
			return
		}
	}
}

func (c *lineCounter) add(m int64) {
	total := c.n.Add(m)
	c.mu.Lock()
	if m > 0 && c.at.IsZero() {
		now := time.Now()
		if !c.last.IsZero() {
			c.maxGap = max(c.maxGap, now.Sub(c.last))
		}
		c.last = now
	}
	if c.done != nil && c.at.IsZero() && total >= c.target {
		c.at = time.Now()
		close(c.done)
	}
	c.mu.Unlock()
}

// longestWait is the longest the sink was held up before the target of
// wait was reached.
func (c *lineCounter) longestWait() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maxGap
}

// wait returns when n events were written.
func (c *lineCounter) wait(n int64, exited <-chan struct{}, timeout time.Duration) (time.Time, error) {
	c.mu.Lock()
	c.target, c.done = n, make(chan struct{})
	done := c.done
	c.mu.Unlock()
	c.add(0)
	select {
	case <-done:
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.at, nil
	case <-exited:
		return time.Time{}, fmt.Errorf("the daemon exited after %d of %d events", c.n.Load(), n)
	case <-time.After(timeout):
		return time.Time{}, fmt.Errorf("%d of %d events written within %s", c.n.Load(), n, timeout)
	}
}
