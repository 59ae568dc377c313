package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/walcast/walcast/pluginkit"
)

// Deliver publishes every event of the batch asynchronously, each with
// Nats-Msg-Id = its event id and Nats-Expected-Stream = the stream, then
// waits for every acknowledgement: nil means the stream stored each event
// (or had stored it already, within its duplicate window: a duplicate,
// counted). An event the server refuses on its own (larger than its
// max_payload or the stream's max_msg_size) is named permanent in a
// *pluginkit.BatchError while the others are stored. ctx ends at the
// sink's deliver_timeout.
func (s *Sink) Deliver(ctx context.Context, b pluginkit.Batch) (pluginkit.DeliverResult, error) {
	if len(b.Events) == 0 {
		return pluginkit.DeliverResult{}, nil
	}
	if err := ctx.Err(); err != nil {
		return pluginkit.DeliverResult{}, pluginkit.Retryable(fmt.Errorf("publish: %w", err))
	}
	s.waitConnected(ctx)
	js, st, err := s.readyJS(ctx)
	if err != nil {
		return pluginkit.DeliverResult{}, err
	}
	events := b.Events
	futures := make([]jetstream.PubAckFuture, len(events))
	failed := map[int]error{}
	for i := range events {
		e := &events[i]
		subj, err := st.subject(e)
		if err != nil {
			failed[i] = pluginkit.Permanent(err)
			continue
		}
		f, err := js.PublishMsgAsync(message(e, subj, st, b.Epoch), jetstream.WithStallWait(st.ackTimeout))
		if err != nil {
			failed[i] = s.publishError(e, err)
			continue
		}
		futures[i] = f
	}
	var res pluginkit.DeliverResult
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				res.Duplicates++
			}
		case err := <-f.Err():
			failed[i] = s.publishError(&events[i], err)
		case <-ctx.Done():
			return res, pluginkit.Retryable(fmt.Errorf("wait for the acks of %d events %s..%s from stream %s: %w (the stream drops what it already stored when they come again)",
				len(events), events[0].ID, events[len(events)-1].ID, st.stream, ctx.Err()))
		}
	}
	if res.Duplicates > 0 {
		// Only after a crash, a retry or a lost ack; worth a line.
		s.log.Info("stream dropped events it already stored", "duplicates", res.Duplicates, "first", events[0].ID.String(), "replay", b.Replay)
	}
	if b.Replay {
		// A replayed event the stream already holds (stored, its ack
		// lost) is in the stream, which is what the operator asked for;
		// reported as a duplicate it would stay parked.
		res.Duplicates = 0
	}
	return res, batchResult(failed, len(events))
}

// message is the NATS message of one event, published to subj.
func message(e *pluginkit.Event, subj string, st settings, epoch string) *nats.Msg {
	h := nats.Header{}
	h.Set(jetstream.MsgIDHeader, msgID(e.ID, epoch))
	h.Set("walcast-id", e.ID.String())
	h.Set(jetstream.ExpectedStreamHeader, st.stream)
	h.Set("walcast-op", string(e.Op))
	h.Set("walcast-table", e.Schema+"."+e.Table)
	return &nats.Msg{Subject: subj, Data: e.Payload, Header: h}
}

// msgID is an event's Nats-Msg-Id: its id, prefixed with the epoch of
// its ids when the host names one (pluginkit.Batch.Epoch). After a
// failover or a healed gap a new slot's ids start again below the old
// ones, and one may equal an id the stream saw within its duplicate
// window: without the epoch JetStream would drop that new event as a
// duplicate. Within one epoch a redelivery has the same message id.
func msgID(id pluginkit.EventID, epoch string) string {
	if epoch == "" {
		return id.String()
	}
	return epoch + "/" + id.String()
}

// readyJS returns the JetStream context once the stream was checked on a
// connection that answered, checking it now if it was not. A stream that
// must be changed stops the pipeline (fatal) instead of parking events.
func (s *Sink) readyJS(ctx context.Context) (jetstream.JetStream, settings, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nc == nil {
		return nil, s.cfg, pluginkit.Permanent(errors.New("deliver before open"))
	}
	if s.recheck.Swap(false) {
		s.ready = false
	}
	if !s.ready {
		if !s.nc.IsConnected() {
			return nil, s.cfg, s.classify("publish", s.disconnected())
		}
		if err := s.prepare(ctx); err != nil {
			if kind, _ := pluginkit.KindOf(err); kind == pluginkit.KindPermanent {
				return nil, s.cfg, pluginkit.Fatal(err)
			}
			return nil, s.cfg, err
		}
	}
	return s.js, s.cfg, nil
}

// waitConnected gives a client that is reconnecting (a server restarted,
// a network blip) up to the connect timeout to get there, within ctx, so
// that a short outage does not cost the batch a failed attempt.
func (s *Sink) waitConnected(ctx context.Context) {
	s.mu.Lock()
	nc, d := s.nc, s.cfg.timeout
	s.mu.Unlock()
	if nc == nil || nc.IsConnected() || nc.IsClosed() {
		return
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !nc.IsConnected() && !nc.IsClosed() {
		select {
		case <-ctx.Done():
			return
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}

// disconnected is why the connection is down.
func (s *Sink) disconnected() error {
	if err := s.nc.LastError(); err != nil {
		return fmt.Errorf("not connected to %v: %w", redactAll(s.cfg.servers), err)
	}
	return fmt.Errorf("not connected to %v (%s): %w", redactAll(s.cfg.servers), s.nc.Status(), nats.ErrNoServers)
}

// batchResult is nil when nothing failed; when everything failed, the
// batch's error (permanent only if every event was refused for good);
// else a BatchError naming the failed events.
func batchResult(failed map[int]error, n int) error {
	if len(failed) == 0 {
		return nil
	}
	if len(failed) < n {
		return &pluginkit.BatchError{Failed: failed}
	}
	var first error
	for i := range n {
		err := failed[i]
		if first == nil {
			first = err
		}
		switch kind, _ := pluginkit.KindOf(err); kind {
		case pluginkit.KindFatal:
			return err
		case pluginkit.KindPermanent:
		default:
			return fmt.Errorf("all %d events failed, the first: %w", n, err)
		}
	}
	return first
}
