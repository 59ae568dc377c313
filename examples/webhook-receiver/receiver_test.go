package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// The example from the Standard Webhooks specification: what walcast's
// webhook sink is tested to produce, this receiver must accept.
func TestVerifyStandardWebhooksVector(t *testing.T) {
	key, err := SigningKey(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	body := []byte(`{"test": 2432232314}`)
	now := time.Unix(1614265330, 0)

	if err := Verify(key, h, body, now, DefaultTolerance); err != nil {
		t.Errorf("Verify(spec vector) = %v", err)
	}
	// Rotating secrets: any of several signatures may match.
	h.Set("webhook-signature", "v1,Zm9v v1a,c2lnbmVk v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	if err := Verify(key, h, body, now, DefaultTolerance); err != nil {
		t.Errorf("Verify(several signatures) = %v", err)
	}
	if err := Verify(key, h, []byte(`{"test": 2432232315}`), now, DefaultTolerance); !errors.Is(err, ErrBadSignature) {
		t.Errorf("Verify(changed body) = %v, want ErrBadSignature", err)
	}
	if err := Verify(key, h, body, now.Add(5*time.Minute+time.Second), DefaultTolerance); !errors.Is(err, ErrStaleTimestamp) {
		t.Errorf("Verify(5m1s later) = %v, want ErrStaleTimestamp", err)
	}
	if err := Verify(key, h, body, now.Add(-5*time.Minute-time.Second), DefaultTolerance); !errors.Is(err, ErrStaleTimestamp) {
		t.Errorf("Verify(timestamp 5m1s in the future) = %v, want ErrStaleTimestamp", err)
	}
	h.Del("webhook-id")
	if err := Verify(key, h, body, now, DefaultTolerance); !errors.Is(err, ErrMissingHeaders) {
		t.Errorf("Verify(no webhook-id) = %v, want ErrMissingHeaders", err)
	}
}

// fixture is a receiver behind an HTTP server, with a clock and a record of
// every effect applied.
type fixture struct {
	t   *testing.T
	url string
	key []byte

	mu      sync.Mutex
	now     time.Time // the receiver's clock
	applied []string  // event ids, in the order their effects ran
	failOn  string    // an event id whose effect fails
}

func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fixture) set(now time.Time, failOn string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now, f.failOn = now, failOn
}

func newFixture(t *testing.T) *fixture {
	key, err := SigningKey(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, key: key, now: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
	rcv := NewReceiver(ReceiverConfig{
		Key: key,
		Now: f.clock,
		Apply: func(_ context.Context, e Event) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			if e.ID.String() == f.failOn {
				return errors.New("database unavailable")
			}
			f.applied = append(f.applied, e.ID.String())
			return nil
		},
	})
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	return f
}

// batch builds a body the way walcast's webhook sink does.
func batch(ids ...string) []byte {
	var events []json.RawMessage
	for _, id := range ids {
		events = append(events, json.RawMessage(`{"id":"`+id+`","schema":"public","table":"orders","op":"insert","key":{"id":1},"new":{"id":1},"old":null}`))
	}
	b, _ := json.Marshal(map[string]any{"events": events})
	return b
}

// post signs body with key at ts and posts it, as one delivery attempt.
func (f *fixture) post(body []byte, key []byte, ts time.Time) (int, Result) {
	f.t.Helper()
	id := "wc1_62fc54b86ac922611b71f0ccb8b89ba5" // a webhook-id as the sink sends it: names the exact body
	stamp := strconv.FormatInt(ts.Unix(), 10)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + stamp + "."))
	mac.Write(body)

	req, err := http.NewRequestWithContext(f.t.Context(), http.MethodPost, f.url, bytes.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", stamp)
	req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	var res Result
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
			f.t.Fatalf("decode answer: %v", err)
		}
	}
	return resp.StatusCode, res
}

func (f *fixture) appliedIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.applied...)
}

func TestRedeliveredBatchIsRecognisedAsDuplicates(t *testing.T) {
	f := newFixture(t)
	body := batch("0/16B3748:0", "0/16B3748:1", "0/16B3748:2")

	code, res := f.post(body, f.key, f.clock())
	if code != http.StatusOK || res != (Result{Processed: 3}) {
		t.Fatalf("first delivery: %d %+v, want 200 with 3 processed", code, res)
	}
	// The sink did not get the answer (a timeout, say) and delivers the
	// batch again, signed afresh a little later.
	later := f.clock().Add(30 * time.Second)
	f.set(later, "")
	code, res = f.post(body, f.key, later)
	if code != http.StatusOK || res != (Result{Duplicates: 3}) {
		t.Fatalf("second delivery: %d %+v, want 200 with 3 duplicates", code, res)
	}
	if got := f.appliedIDs(); len(got) != 3 {
		t.Errorf("effects ran for %v, want each of the 3 events once", got)
	}
}

func TestBadSignatureIs401(t *testing.T) {
	f := newFixture(t)
	body := batch("0/16B3748:0")

	wrongKey, _ := SigningKey("whsec_" + base64.StdEncoding.EncodeToString([]byte("another secret")))
	if code, _ := f.post(body, wrongKey, f.clock()); code != http.StatusUnauthorized {
		t.Errorf("signed with another secret: %d, want 401", code)
	}
	if code, _ := f.post(body, f.key, f.clock().Add(-6*time.Minute)); code != http.StatusUnauthorized {
		t.Errorf("timestamp 6 minutes old: %d, want 401", code)
	}
	if got := f.appliedIDs(); len(got) != 0 {
		t.Errorf("effects ran for rejected requests: %v", got)
	}
}

// A failed effect answers 500, so walcast delivers the batch again; what was
// applied before the failure is then skipped, the rest applied.
func TestFailedBatchResumesAfterTheAppliedEvents(t *testing.T) {
	f := newFixture(t)
	body := batch("0/16B3748:0", "0/16B3748:1", "0/16B3748:2")

	f.set(f.clock(), "0/16B3748:1")
	if code, _ := f.post(body, f.key, f.clock()); code != http.StatusInternalServerError {
		t.Fatalf("delivery with a failing effect: %d, want 500", code)
	}
	f.set(f.clock(), "")
	code, res := f.post(body, f.key, f.clock())
	if code != http.StatusOK || res != (Result{Processed: 2, Duplicates: 1}) {
		t.Fatalf("redelivery: %d %+v, want 200 with 2 processed, 1 duplicate", code, res)
	}
	want := []string{"0/16B3748:0", "0/16B3748:1", "0/16B3748:2"}
	if got := f.appliedIDs(); !slices.Equal(got, want) {
		t.Errorf("effects ran for %v, want %v", got, want)
	}
}

// Batches of different rows are delivered in parallel, so a lower id can
// arrive after a higher one. It is new, not a duplicate: that is why the
// receiver keeps a set of ids rather than the highest id seen.
func TestLowerIDArrivingLaterIsNotADuplicate(t *testing.T) {
	f := newFixture(t)
	if code, res := f.post(batch("0/1A:0"), f.key, f.clock()); code != http.StatusOK || res.Processed != 1 {
		t.Fatalf("first batch: %d %+v", code, res)
	}
	if code, res := f.post(batch("0/A:0"), f.key, f.clock()); code != http.StatusOK || res.Processed != 1 {
		t.Fatalf("batch with a lower id: %d %+v, want it processed", code, res)
	}
}
