package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

const (
	// DefaultTolerance is how far a request's webhook-timestamp may be from
	// the receiver's clock. It bounds how long a captured request can be
	// replayed by someone else; walcast signs every attempt afresh, so its
	// own retries always carry a current timestamp.
	DefaultTolerance = 5 * time.Minute
	// DefaultMaxBody bounds a request body. walcast's webhook sink sends
	// batch_size envelopes per request (100 by default).
	DefaultMaxBody = 32 << 20
)

// Verification failures. All of them are answered with 401: walcast retries
// them with backoff and, if they persist, parks the events, which is what
// a misconfigured secret should lead to.
var (
	ErrMissingHeaders = errors.New("missing webhook-id, webhook-timestamp or webhook-signature header")
	ErrBadTimestamp   = errors.New("webhook-timestamp is not a Unix time in seconds")
	ErrStaleTimestamp = errors.New("webhook-timestamp is outside the tolerance")
	ErrBadSignature   = errors.New("no webhook-signature matches")
)

// SigningKey turns a Standard Webhooks secret ("whsec_" followed by base64)
// into the HMAC key. Like walcast's webhook sink, it uses any other
// non-empty string as raw key bytes.
func SigningKey(secret string) ([]byte, error) {
	if secret == "" {
		return nil, errors.New("the signing secret is empty")
	}
	b64, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		return []byte(secret), nil
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("the part after whsec_ must be base64: %w", err)
	}
	if len(key) == 0 {
		return nil, errors.New("the signing secret is empty after whsec_")
	}
	return key, nil
}

// Verify checks a request the Standard Webhooks way: the signature is
// base64(HMAC-SHA256(key, id + "." + timestamp + "." + body)), and the
// webhook-signature header holds one or more space-separated "v1,<sig>"
// entries (several while a secret is being rotated), any of which may
// match. The timestamp must be within tolerance of now, in either
// direction.
func Verify(key []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return ErrMissingHeaders
	}
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrBadTimestamp
	}
	if d := now.Sub(time.Unix(secs, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: %s off", ErrStaleTimestamp, d.Round(time.Second))
	}

	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	want := mac.Sum(nil)
	for _, entry := range strings.Fields(sigs) {
		version, b64, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue // another scheme (v1a, asymmetric): not ours to check
		}
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrBadSignature
}

// Event is what the receiver needs of an envelope; Raw is the whole of it.
type Event struct {
	ID     pluginkit.EventID
	Schema string
	Table  string
	Op     string
	Raw    json.RawMessage
}

// ReceiverConfig configures a Receiver.
type ReceiverConfig struct {
	// Key is the signing key (see SigningKey). Required.
	Key []byte
	// Apply performs an event's effect. An error makes the receiver answer
	// 500; walcast then delivers the batch again, and the events applied
	// before the failure are recognised as duplicates.
	Apply func(ctx context.Context, e Event) error
	// Log receives one line per rejected request; nil discards.
	Log *slog.Logger
	// Tolerance defaults to DefaultTolerance, MaxBody to DefaultMaxBody.
	Tolerance time.Duration
	MaxBody   int64
	// Now defaults to time.Now; tests fix it.
	Now func() time.Time
}

// Receiver is an http.Handler for walcast's webhook sink.
//
// walcast delivers at least once: a batch whose answer was lost (a timeout,
// a crash on either side) arrives again, with the same event ids. Exactly
// once processing is at-least-once delivery plus deduplication on the id,
// so the Receiver remembers every id it processed and skips it the next
// time.
//
// It remembers ids in memory, which is enough to show the idea but loses
// them on restart. A production receiver stores the processed id in the
// same database transaction as the event's effect:
//
//	BEGIN;
//	INSERT INTO processed_events (event_id) VALUES ($1) ON CONFLICT DO NOTHING;
//	-- 0 rows inserted: a duplicate, skip the effect
//	UPDATE accounts SET ...;  -- the effect
//	COMMIT;
//
// and answers 2xx only after the commit. With the two in one transaction
// neither can happen without the other, so a crash between them cannot
// lose an event or apply one twice.
//
// Dedupe on the set of ids, not on "the highest id seen": walcast delivers
// batches of different rows in parallel (max_in_flight), so an event with a
// lower id can arrive after one with a higher id and is not a duplicate.
type Receiver struct {
	cfg ReceiverConfig

	// mu is held for a whole batch, so that two deliveries of the same
	// event in flight at once (a retry overtaking an attempt the sink had
	// given up on) cannot both apply it. A database gets this from the
	// unique key on processed_events.event_id.
	mu        sync.Mutex
	processed map[pluginkit.EventID]struct{}
}

// NewReceiver returns a Receiver that has processed nothing yet.
func NewReceiver(cfg ReceiverConfig) *Receiver {
	if cfg.Tolerance <= 0 {
		cfg.Tolerance = DefaultTolerance
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Receiver{cfg: cfg, processed: make(map[pluginkit.EventID]struct{})}
}

// Result is the JSON body of a 200 answer. walcast only looks at the
// status code; the counts are for people and tests.
type Result struct {
	Processed  int `json:"processed"`
	Duplicates int `json:"duplicates"`
}

func (rcv *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, rcv.cfg.MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	// Verify before parsing: nothing unauthenticated reaches the decoder.
	if err := Verify(rcv.cfg.Key, r.Header, body, rcv.cfg.Now(), rcv.cfg.Tolerance); err != nil {
		rcv.cfg.Log.Warn("rejected webhook", "webhook_id", r.Header.Get("webhook-id"), "err", err)
		http.Error(w, "invalid signature", http.StatusUnauthorized)
		return
	}
	events, err := parseBatch(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}

	res, err := rcv.process(r.Context(), events)
	if err != nil {
		// Not 2xx: walcast keeps the batch and delivers it again.
		rcv.cfg.Log.Error("process webhook batch", "webhook_id", r.Header.Get("webhook-id"), "err", err)
		http.Error(w, "processing failed; deliver again", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(res) // the status is already sent; walcast acts on it alone
}

// process applies every event not processed before, in the batch's order
// (commit order for each row), and records its id once applied.
func (rcv *Receiver) process(ctx context.Context, events []Event) (Result, error) {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	var res Result
	for _, e := range events {
		if _, done := rcv.processed[e.ID]; done {
			res.Duplicates++
			continue
		}
		if err := rcv.cfg.Apply(ctx, e); err != nil {
			return res, fmt.Errorf("apply event %s: %w", e.ID, err)
		}
		rcv.processed[e.ID] = struct{}{}
		res.Processed++
	}
	return res, nil
}

// parseBatch decodes {"events":[...]} and each event's routing fields.
func parseBatch(body []byte) ([]Event, error) {
	var batch struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(body, &batch); err != nil {
		return nil, fmt.Errorf("decode batch: %w", err)
	}
	events := make([]Event, len(batch.Events))
	for i, raw := range batch.Events {
		var env struct {
			ID     string `json:"id"`
			Schema string `json:"schema"`
			Table  string `json:"table"`
			Op     string `json:"op"`
		}
		if err := json.Unmarshal(raw, &env); err != nil {
			return nil, fmt.Errorf("decode event %d: %w", i, err)
		}
		id, err := pluginkit.ParseEventID(env.ID)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		events[i] = Event{ID: id, Schema: env.Schema, Table: env.Table, Op: env.Op, Raw: raw}
	}
	return events, nil
}
