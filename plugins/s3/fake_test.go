package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/walcast/walcast/pluginkit"
)

// fakeS3 is gofakes3, an S3 API server, on 127.0.0.1 behind a handler that
// can answer with an S3 error, hang, drop the connection, and that records
// every data object a successful request wrote, in the order it was
// written.
type fakeS3 struct {
	t       testing.TB
	URL     string
	bucket  string
	backend *s3mem.Backend

	mu      sync.Mutex
	fault   *s3Fault      // answer every request with this error
	dropPut bool          // cut the connection of every data PUT mid-body
	hung    chan struct{} // while set, requests wait for it to close
	writes  []write       // data objects written, in order
	batch   int           // Deliver calls begun (batchCounter)
	methods map[string]int
	parts   int // UploadPart requests
}

// write is a data object a request wrote, during which Deliver call.
type write struct {
	key   string
	batch int
}

// s3Fault is an S3 error answer.
type s3Fault struct {
	status int
	code   string
}

const testBucket = "lake"

func startFakeS3(t testing.TB) *fakeS3 {
	t.Helper()
	return startFakeS3With(t, nil, func(srv *httptest.Server) { srv.Start() })
}

// startFakeS3With is startFakeS3 with front, when not nil, in front of
// everything (it sees each request first), started by start (Start or
// StartTLS, after setting the server's TLS config).
func startFakeS3With(t testing.TB, front func(http.Handler) http.Handler, start func(*httptest.Server)) *fakeS3 {
	t.Helper()
	f := &fakeS3{t: t, bucket: testBucket, backend: s3mem.New(), methods: map[string]int{}}
	if err := f.backend.CreateBucket(testBucket); err != nil {
		t.Fatal(err)
	}
	faker := gofakes3.New(f.backend, gofakes3.WithLogger(gofakes3.DiscardLog()))
	inner := faker.Server()
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.serve(inner, w, r)
	})
	if front != nil {
		h = front(h)
	}
	srv := httptest.NewUnstartedServer(h)
	start(srv)
	t.Cleanup(srv.Close)
	t.Cleanup(f.release)
	f.URL = srv.URL
	return f
}

func (f *fakeS3) serve(inner http.Handler, w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	fault, hung, drop := f.fault, f.hung, f.dropPut
	f.methods[r.Method]++
	if r.URL.Query().Has("partNumber") {
		f.parts++
	}
	f.mu.Unlock()
	if hung != nil {
		select {
		case <-hung:
		case <-r.Context().Done():
			return
		}
	}
	if fault != nil {
		writeS3Error(w, fault.status, fault.code)
		return
	}
	key := strings.TrimPrefix(r.URL.Path, "/"+f.bucket+"/")
	data := r.Method == http.MethodPut && !strings.Contains(key, "_walcast/") && !r.URL.Query().Has("partNumber")
	if drop && data {
		// Read part of the body, then cut the connection: a network error
		// in the middle of an upload.
		io.CopyN(io.Discard, r.Body, 100)
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	inner.ServeHTTP(rec, r)
	complete := r.Method == http.MethodPost && r.URL.Query().Has("uploadId")
	if rec.status == http.StatusOK && (data || complete) && !strings.Contains(key, "_walcast/") {
		f.mu.Lock()
		f.writes = append(f.writes, write{key, f.batch})
		f.mu.Unlock()
	}
}

func writeS3Error(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected by the test</Message><RequestId>test</RequestId></Error>`, code)
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// failWith makes every request fail with status and code until restore.
func (f *fakeS3) failWith(status int, code string) (restore func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fault = &s3Fault{status, code}
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.fault = nil
	}
}

// dropUploads cuts the connection of every data PUT until restore.
func (f *fakeS3) dropUploads() (restore func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropPut = true
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.dropPut = false
	}
}

// hang holds every request until release.
func (f *fakeS3) hang() (release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan struct{})
	f.hung = ch
	return sync.OnceFunc(func() {
		f.mu.Lock()
		if f.hung == ch {
			f.hung = nil
		}
		f.mu.Unlock()
		close(ch)
	})
}

func (f *fakeS3) release() {
	f.mu.Lock()
	ch := f.hung
	f.hung = nil
	f.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// object reads one object's bytes from the server's store.
func (f *fakeS3) object(key string) []byte {
	f.t.Helper()
	obj, err := f.backend.GetObject(f.bucket, key, nil)
	if err != nil {
		f.t.Fatalf("get %s: %v", key, err)
	}
	defer obj.Contents.Close()
	b, err := io.ReadAll(obj.Contents)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// keys lists every key under prefix, in name order.
func (f *fakeS3) keys(prefix string) []string {
	f.t.Helper()
	res, err := f.backend.ListBucket(f.bucket, &gofakes3.Prefix{Prefix: prefix, HasPrefix: true}, gofakes3.ListBucketPage{})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, c := range res.Contents {
		out = append(out, c.Key)
	}
	slices.Sort(out)
	return out
}

// received returns the envelopes of every JSON lines object written: what
// reached the destination, for the conformance suite, which wants it
// oldest first. S3 has no order among objects and a batch's objects go up
// in parallel, so the events each Deliver call wrote (counted by
// batchCounter) are given once each, in id order, and the calls in the
// order they began.
func (f *fakeS3) received() [][]byte {
	f.mu.Lock()
	writes := slices.Clone(f.writes)
	f.mu.Unlock()
	var out [][]byte
	for len(writes) > 0 {
		n := 1
		for n < len(writes) && writes[n].batch == writes[0].batch {
			n++
		}
		byID := map[pluginkit.EventID][]byte{}
		for _, w := range writes[:n] {
			if !strings.HasSuffix(w.key, ".jsonl") {
				continue
			}
			for _, line := range bytes.Split(bytes.TrimSuffix(f.object(w.key), []byte("\n")), []byte("\n")) {
				byID[envelopeID(f.t, line)] = line
			}
		}
		for _, id := range slices.SortedFunc(maps.Keys(byID), pluginkit.EventID.Compare) {
			out = append(out, byID[id])
		}
		writes = writes[n:]
	}
	return out
}

// envelopeID reads an envelope's id.
func envelopeID(t testing.TB, line []byte) pluginkit.EventID {
	t.Helper()
	var e struct{ ID pluginkit.EventID }
	if err := json.Unmarshal(line, &e); err != nil {
		t.Fatalf("object line %.100s: %v", line, err)
	}
	return e.ID
}

// batchCounter wraps a sink so that the fake knows which Deliver call
// wrote what.
type batchCounter struct {
	pluginkit.BatchSink
	f *fakeS3
}

func (b batchCounter) Deliver(ctx context.Context, batch pluginkit.Batch) (pluginkit.DeliverResult, error) {
	b.f.mu.Lock()
	b.f.batch++
	b.f.mu.Unlock()
	return b.BatchSink.Deliver(ctx, batch)
}

func (f *fakeS3) count(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.methods[method]
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
