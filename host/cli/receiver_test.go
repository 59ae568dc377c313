package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

// The far end of a webhook sink: a real HTTP server on 127.0.0.1 that
// records every event it takes, and can fail, hang, slow down or answer
// each request as a test decides.

// received is one event as it arrived at a receiver.
type received struct {
	ID    pluginkit.EventID
	Xid   uint32
	Table string
	Op    string
	Key   string // compact JSON
	Raw   []byte
}

// envelope is what the tests read of an event's JSON envelope, wherever
// it arrived (a webhook request, a JSON line, a Kafka record, a gRPC call).
type envelope struct {
	ID     string          `json:"id"`
	Xid    uint32          `json:"xid"`
	Schema string          `json:"schema"`
	Table  string          `json:"table"`
	Op     string          `json:"op"`
	Key    json.RawMessage `json:"key"`
}

// decodeEnvelope reads raw as an event's envelope.
func decodeEnvelope(raw []byte) (envelope, error) {
	var e envelope
	err := json.Unmarshal(raw, &e)
	return e, err
}

// received is the event as a receiver records it: its id parsed, its key
// compacted, raw kept as the bytes that arrived.
func (e envelope) received(raw []byte) (received, error) {
	id, err := pluginkit.ParseEventID(e.ID)
	if err != nil {
		return received{}, err
	}
	var key bytes.Buffer
	if err := json.Compact(&key, e.Key); err != nil {
		return received{}, fmt.Errorf("event %s: key: %w", e.ID, err)
	}
	return received{ID: id, Xid: e.Xid, Table: e.Table, Op: e.Op, Key: key.String(), Raw: raw}, nil
}

type receiverMode int32

const (
	modeOK   receiverMode = iota
	modeFail              // answer 500
	modeHang              // hold the request until the mode changes or the client gives up
)

// receiver is a real HTTP webhook endpoint on 127.0.0.1 that records every
// event of every successful request, in arrival order.
type receiver struct {
	t    testing.TB
	URL  string
	mu   sync.Mutex
	got  []received
	mode receiverMode
	wake chan struct{} // closed and replaced when the mode changes
	reqs int
	// delay, when set, is slept before answering 200 (a slow sink).
	delay time.Duration
	// respond, when set, decides each request's answer from its events
	// (0 means 200); a non-200 answer records nothing.
	respond func(h http.Header, body []byte, evs []received) (status int, header http.Header)
	// arrivals holds the time each event arrived (parallel to got).
	arrivals []time.Time
	// inFlight counts requests being handled per row; overlap records a
	// row that was in two requests at once.
	inFlight map[string]int
	overlap  []string
	// ids and ops count distinct ids and events by op as they arrive, so
	// that tests polling them do not hold mu for work proportional to
	// everything received (under the race detector that starved the
	// handlers and made the sink look slow).
	ids map[pluginkit.EventID]struct{}
	ops map[string]int
}

// serveLoopback serves h on a free port of 127.0.0.1 until the test ends
// and returns its base URL (http://127.0.0.1:port).
func serveLoopback(t testing.TB, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return "http://" + l.Addr().String()
}

func newReceiver(t testing.TB) *receiver {
	t.Helper()
	r := &receiver{t: t, wake: make(chan struct{})}
	r.URL = serveLoopback(t, r) + "/hooks"
	// Runs before the server's shutdown (cleanups run in reverse): a
	// request the receiver holds is let go first.
	t.Cleanup(func() { r.setMode(modeOK) })
	return r
}

func (r *receiver) setMode(m receiverMode) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mode = m
	close(r.wake)
	r.wake = make(chan struct{})
}

// ServeHTTP answers one request of the sink: as the mode says (fail,
// hang, slow down), then as respond says, and records its events when it
// answers 200.
func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !r.awaitMode(w, req) {
		return
	}
	evs, err := r.batchEvents(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	done := r.enter(evs)
	defer done()
	r.mu.Lock()
	respond := r.respond
	r.mu.Unlock()
	if respond != nil {
		if status, hdr := respond(req.Header, body, evs); status != 0 && status != http.StatusOK {
			for k, v := range hdr {
				w.Header()[k] = v
			}
			w.WriteHeader(status)
			return
		}
	}
	r.record(evs)
	w.WriteHeader(http.StatusOK)
}

// awaitMode holds the request while the receiver hangs, answers 500 when
// it fails, and sleeps the delay otherwise; false when the request got its
// answer (or its client gave up).
func (r *receiver) awaitMode(w http.ResponseWriter, req *http.Request) bool {
	for {
		r.mu.Lock()
		r.reqs++
		mode, wake, delay := r.mode, r.wake, r.delay
		r.mu.Unlock()
		switch mode {
		case modeFail:
			http.Error(w, "receiver told to fail", http.StatusInternalServerError)
			return false
		case modeHang:
			select {
			case <-wake:
				continue
			case <-req.Context().Done():
				return false
			}
		}
		if delay > 0 {
			time.Sleep(delay)
		}
		return true
	}
}

// batchEvents reads a webhook body's events; an event it cannot read
// fails the test and is left out.
func (r *receiver) batchEvents(body []byte) ([]received, error) {
	var batch struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(body, &batch); err != nil {
		r.t.Errorf("receiver: bad body: %v: %.200s", err, body)
		return nil, err
	}
	evs := make([]received, 0, len(batch.Events))
	for _, raw := range batch.Events {
		e, err := decodeEnvelope(raw)
		if err != nil {
			r.t.Errorf("receiver: bad event: %v", err)
			continue
		}
		ev, err := e.received(raw)
		if err != nil {
			r.t.Errorf("receiver: %v", err)
			continue
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// enter counts the rows of evs in flight, noting a row that already was,
// and returns the function that counts them out.
func (r *receiver) enter(evs []received) (done func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inFlight == nil {
		r.inFlight = map[string]int{}
	}
	rows := map[string]bool{}
	for _, e := range evs {
		k := e.Table + e.Key
		if !rows[k] {
			rows[k] = true
			if r.inFlight[k]++; r.inFlight[k] > 1 {
				r.overlap = append(r.overlap, k)
			}
		}
	}
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for k := range rows {
			r.inFlight[k]--
		}
	}
}

// record keeps evs as delivered, with their arrival time.
func (r *receiver) record(evs []received) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.got = append(r.got, evs...)
	if r.ids == nil {
		r.ids, r.ops = map[pluginkit.EventID]struct{}{}, map[string]int{}
	}
	for _, e := range evs {
		r.ids[e.ID] = struct{}{}
		r.ops[e.Op]++
		r.arrivals = append(r.arrivals, now)
	}
}

func (r *receiver) setRespond(f func(h http.Header, body []byte, evs []received) (int, http.Header)) {
	r.mu.Lock()
	r.respond = f
	r.mu.Unlock()
}

// rejectRow makes the receiver answer status to every request that
// carries an event of the row whose key (compact JSON) is key, until the
// test turns the switch it returns off.
func (r *receiver) rejectRow(key string, status int) *atomic.Bool {
	var reject atomic.Bool
	reject.Store(true)
	r.setRespond(func(_ http.Header, _ []byte, evs []received) (int, http.Header) {
		for _, e := range evs {
			if e.Key == key && reject.Load() {
				return status, nil
			}
		}
		return 0, nil
	})
	return &reject
}

// setDelay makes the receiver wait d before answering each request.
func (r *receiver) setDelay(d time.Duration) {
	r.mu.Lock()
	r.delay = d
	r.mu.Unlock()
}

func (r *receiver) arrivalTimes() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.arrivals...)
}

func (r *receiver) overlaps() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.overlap...)
}

func (r *receiver) events() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// distinct is how many different ids arrived.
func (r *receiver) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ids)
}

// countOp is how many events of op arrived (redeliveries included).
func (r *receiver) countOp(op string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ops[op]
}
