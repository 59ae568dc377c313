package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/walcast/walcast/pluginkit"
	receiverv1 "github.com/walcast/walcast/proto/receiver/v1"
)

// MaxMessageBytes is the request size the server should accept
// (grpc.MaxRecvMsgSize): walcast's grpc sink sends batches of up to 16 MiB
// of envelopes, a single larger event alone, and requests of up to 64 MiB.
const MaxMessageBytes = 64 << 20

// Event is what the receiver needs of an event; Payload is the whole JSON
// envelope.
type Event struct {
	ID      pluginkit.EventID
	Schema  string
	Table   string
	Op      string
	Key     []byte
	Payload []byte
}

// ReceiverConfig configures a Receiver.
type ReceiverConfig struct {
	// Token, when set, is the bearer token every call must carry (the
	// sink's `token`).
	Token string
	// Apply performs an event's effect. An error makes the call fail with
	// UNAVAILABLE; walcast then delivers the batch again, and the events
	// applied before the failure are recognised as duplicates.
	Apply func(ctx context.Context, e Event) error
	// Log receives one line per refused call; nil discards.
	Log *slog.Logger
}

// Receiver implements the Receiver service for walcast's grpc sink.
//
// walcast delivers at least once: a batch whose answer was lost (a
// timeout, a crash on either side) arrives again, with the same event ids.
// Exactly-once processing is at-least-once delivery plus deduplication on
// the id, so the Receiver remembers every id it processed and skips it the
// next time.
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
// and answers OK only after the commit: walcast acknowledges the batch on
// that answer and lets PostgreSQL discard the WAL.
//
// Dedupe on the set of ids, not on "the highest id seen": walcast delivers
// batches of different rows in parallel (max_in_flight), so an event with
// a lower id can arrive after one with a higher id and is not a duplicate.
type Receiver struct {
	receiverv1.UnimplementedReceiverServer
	cfg ReceiverConfig

	// mu is held for a whole batch, so that two deliveries of the same
	// event in flight at once (a retry overtaking an attempt the sink
	// gave up on) cannot both apply it. A database gets this from the
	// unique key on processed_events.event_id.
	mu        sync.Mutex
	processed map[pluginkit.EventID]struct{}
}

// Interface guards.
var _ receiverv1.ReceiverServer = (*Receiver)(nil)

// NewReceiver returns a Receiver that has processed nothing yet.
func NewReceiver(cfg ReceiverConfig) *Receiver {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Receiver{cfg: cfg, processed: make(map[pluginkit.EventID]struct{})}
}

// Deliver processes a batch. Its status code tells walcast what to do
// (see proto/receiver/v1/receiver.proto):
//
//   - OK once every event is processed (or was already);
//   - UNAUTHENTICATED for a missing or wrong token: retried, so a token
//     being rotated does not park anything;
//   - INVALID_ARGUMENT for an event that cannot be read: permanent, walcast
//     parks it for an operator instead of retrying it forever;
//   - UNAVAILABLE when an effect fails: retried with backoff.
func (rcv *Receiver) Deliver(ctx context.Context, req *receiverv1.DeliverRequest) (*receiverv1.DeliverResponse, error) {
	if !rcv.authorized(ctx) {
		rcv.cfg.Log.Warn("refused call without the right token", "pipeline", req.GetPipeline(), "sink", req.GetSink())
		return nil, status.Error(codes.Unauthenticated, "missing or wrong bearer token")
	}
	events, err := parseEvents(req.GetEvents())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	dups, err := rcv.process(ctx, events)
	if err != nil {
		rcv.cfg.Log.Error("process batch", "pipeline", req.GetPipeline(), "sink", req.GetSink(), "err", err)
		return nil, status.Error(codes.Unavailable, "processing failed; deliver again")
	}
	return &receiverv1.DeliverResponse{Duplicates: int64(dups)}, nil
}

// authorized checks the bearer token in constant time.
func (rcv *Receiver) authorized(ctx context.Context) bool {
	if rcv.cfg.Token == "" {
		return true
	}
	md, _ := metadata.FromIncomingContext(ctx)
	got := md.Get("authorization")
	want := "Bearer " + rcv.cfg.Token
	return len(got) == 1 && subtle.ConstantTimeCompare([]byte(got[0]), []byte(want)) == 1
}

// process applies every event not processed before, in the batch's order
// (commit order for each row), records its id once applied, and returns
// how many were duplicates.
func (rcv *Receiver) process(ctx context.Context, events []Event) (dups int, err error) {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for _, e := range events {
		if _, done := rcv.processed[e.ID]; done {
			dups++
			continue
		}
		if err := rcv.cfg.Apply(ctx, e); err != nil {
			return dups, fmt.Errorf("apply event %s: %w", e.ID, err)
		}
		rcv.processed[e.ID] = struct{}{}
	}
	return dups, nil
}

// parseEvents converts the request's events, parsing each id: ids compare
// by commit LSN, then index, never as strings.
func parseEvents(pb []*receiverv1.Event) ([]Event, error) {
	if len(pb) == 0 {
		return nil, errors.New("empty batch")
	}
	events := make([]Event, len(pb))
	for i, e := range pb {
		id, err := pluginkit.ParseEventID(e.GetId())
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		events[i] = Event{ID: id, Schema: e.GetSchema(), Table: e.GetTable(), Op: e.GetOp(), Key: e.GetKey(), Payload: e.GetPayload()}
	}
	return events, nil
}
