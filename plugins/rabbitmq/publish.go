package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walcast/walcast/pluginkit"
)

// Deliver publishes the batch on one channel, in order, as persistent
// messages, and returns once the broker confirmed every one of them
// (publisher confirms): nil means every message is in the queues bound
// for it (on disk for durable queues). A message the broker nacks, or
// returns because no queue is bound for it (mandatory), or that is larger
// than the broker takes, fails alone, named in a *pluginkit.BatchError;
// the others are delivered. ctx ends at the sink's deliver_timeout.
func (s *Sink) Deliver(ctx context.Context, b pluginkit.Batch) (pluginkit.DeliverResult, error) {
	if len(b.Events) == 0 {
		return pluginkit.DeliverResult{}, nil
	}
	// A message over the broker's size limit makes it close the channel,
	// which is how the limit is learnt: then the batch goes once more,
	// without the messages above it.
	failed, err := s.publish(ctx, b.Events)
	if errors.Is(err, errLimitLearnt) {
		failed, err = s.publish(ctx, b.Events)
	}
	if err != nil {
		return pluginkit.DeliverResult{}, err
	}
	switch len(failed) {
	case 0:
		return pluginkit.DeliverResult{}, nil
	case len(b.Events):
		return pluginkit.DeliverResult{}, failed[0]
	}
	return pluginkit.DeliverResult{}, &pluginkit.BatchError{Failed: failed}
}

// errLimitLearnt: the broker closed the channel over a message larger than
// its max_message_size, which the sink now knows.
var errLimitLearnt = errors.New("learnt the broker's message size limit")

// published is a message waiting for its confirm.
type published struct {
	index int
	dc    *amqp.DeferredConfirmation
}

// publish sends events and waits for their confirms; failed names the
// events refused on their own, err is a failure of the batch.
func (s *Sink) publish(ctx context.Context, events []pluginkit.Event) (failed map[int]error, err error) {
	pc, err := s.channel(ctx)
	if err != nil {
		return nil, err
	}
	failed = map[int]error{}
	limit := s.maxBytes()
	pending := make([]published, 0, len(events))
	for i := range events {
		e := &events[i]
		key := s.cfg.routingKeyOf(e)
		switch {
		case int64(len(e.Payload)) > limit:
			failed[i] = pluginkit.Permanent(fmt.Errorf("event %s is %d bytes, more than the %d a message may have (max_message_bytes, or the broker's max_message_size): raise both to deliver it",
				e.ID, len(e.Payload), limit))
			continue
		case len(key) > maxRoutingKey && e.Route != "":
			failed[i] = pluginkit.Permanent(fmt.Errorf("event %s: route %q is longer than the %d bytes of an AMQP routing key: fix the sink's route expression", e.ID, key, maxRoutingKey))
			continue
		case len(key) > maxRoutingKey:
			failed[i] = pluginkit.Permanent(fmt.Errorf("event %s: routing key %q is longer than AMQP's %d bytes: shorten routing_key", e.ID, key, maxRoutingKey))
			continue
		}
		dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, s.cfg.exchange, key, s.cfg.mandatory, false, message(e))
		if err != nil {
			return nil, s.channelFailed(pc, fmt.Sprintf("publish event %s", e.ID), err)
		}
		pending = append(pending, published{index: i, dc: dc})
	}
	returned, err := s.confirms(ctx, pc, events, pending)
	if err != nil {
		return nil, err
	}
	for _, p := range pending {
		e := &events[p.index]
		switch r, ok := returned[e.ID.String()]; {
		case ok:
			failed[p.index] = pluginkit.Retryable(fmt.Errorf("event %s: the broker returned it (%d %s): no queue is bound to exchange %q for routing key %q; bind one (or set mandatory = false to let the broker drop such messages)",
				e.ID, r.ReplyCode, r.ReplyText, s.cfg.exchange, r.RoutingKey))
		case !p.dc.Acked():
			failed[p.index] = pluginkit.Retryable(fmt.Errorf("event %s: the broker nacked it: a queue it was routed to is full (x-max-length with x-overflow = reject-publish) or failed; make room in it", e.ID))
		}
	}
	s.release(pc)
	return failed, nil
}

// confirms waits for every pending confirm, in order, and returns the
// messages the broker returned as unroutable, by message id. The broker
// sends a message's return before its confirm, and the client hands it to
// the return channel before it resolves the confirm, so once the last
// confirm is in every return is in the channel.
func (s *Sink) confirms(ctx context.Context, pc *pubChannel, events []pluginkit.Event, pending []published) (map[string]amqp.Return, error) {
	returned := map[string]amqp.Return{}
	for _, p := range pending {
		for waiting := true; waiting; {
			select {
			case r := <-pc.returns:
				returned[r.MessageId] = r
			case <-p.dc.Done():
				waiting = false
			case <-ctx.Done():
				discard(pc)
				return nil, pluginkit.Retryable(fmt.Errorf("wait for the broker to confirm event %s%s: %w", events[p.index].ID, s.blockedNote(), ctx.Err()))
			}
		}
		if !p.dc.Acked() && pc.ch.IsClosed() {
			return nil, s.channelFailed(pc, fmt.Sprintf("publish event %s", events[p.index].ID), amqp.ErrClosed)
		}
	}
	for {
		select {
		case r := <-pc.returns:
			returned[r.MessageId] = r
		default:
			return returned, nil
		}
	}
}

// message is the AMQP message of an event: the envelope as the body,
// persistent, with the event id as message id.
func message(e *pluginkit.Event) amqp.Publishing {
	return amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    e.ID.String(),
		Type:         string(e.Op),
		AppId:        "walcast",
		Headers: amqp.Table{
			"walcast-id":    e.ID.String(),
			"walcast-table": e.Schema + "." + e.Table,
			"walcast-op":    string(e.Op),
		},
		Body: e.Payload,
	}
}

var maxSizeReason = regexp.MustCompile(`larger than configured max size (\d+)`)

// channelFailed handles a channel the broker closed or a publish that
// failed: it closes the channel, learns a size limit the broker stated,
// and returns the classified cause.
func (s *Sink) channelFailed(pc *pubChannel, what string, err error) error {
	discard(pc)
	var reason *amqp.Error
	select {
	case reason = <-pc.closed:
	default:
	}
	if reason == nil {
		return s.classify(what, err)
	}
	if m := maxSizeReason.FindStringSubmatch(reason.Reason); m != nil {
		if n, perr := strconv.ParseInt(m[1], 10, 64); perr == nil {
			s.mu.Lock()
			s.limit = n
			s.mu.Unlock()
			s.log.Warn("the broker refuses messages above its max_message_size; larger events will be parked", "max_message_size", n, "reason", reason.Reason)
			return errLimitLearnt
		}
	}
	return s.classify(what, reason)
}

// maxBytes is the largest message the sink sends.
func (s *Sink) maxBytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.limit > 0 && s.limit < s.cfg.maxBytes {
		return s.limit
	}
	return s.cfg.maxBytes
}

// blockedNote says, for a timeout, that the broker blocks publishers.
func (s *Sink) blockedNote() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.blocked != nil && s.blocked.Active {
		return fmt.Sprintf(" (the broker blocks publishers: %s; free memory or disk space on it)", s.blocked.Reason)
	}
	return ""
}
