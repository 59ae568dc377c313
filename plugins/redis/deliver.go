package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/walcast/walcast/pluginkit"
)

// Deliver writes the batch in one MULTI/EXEC that also moves the
// checkpoint; nil means EXEC succeeded. Events at or below the checkpoint
// are skipped as duplicates, except in a replay batch (Batch.Replay):
// parked events lie below the checkpoint by definition and were never
// written; and except in a batch of another epoch than the checkpoint's
// (Batch.Epoch): after a failover the new slot's ids can be lower than
// the checkpoint, so the first batch of a new epoch is written whole. An event the server refuses on its own (larger than the
// largest value it takes, a stream key holding another type) is named in
// a *pluginkit.BatchError while the others are written; a batch whose
// every event is refused fails as a whole. ctx ends at the sink's
// deliver_timeout.
func (s *Sink) Deliver(ctx context.Context, b pluginkit.Batch) (pluginkit.DeliverResult, error) {
	events := b.Events
	if len(events) == 0 {
		return pluginkit.DeliverResult{}, nil
	}
	if err := s.acquire(ctx); err != nil {
		return pluginkit.DeliverResult{}, err
	}
	defer s.release()
	switch {
	case s.client == nil:
		return pluginkit.DeliverResult{}, pluginkit.Permanent(errors.New("deliver before open"))
	case s.fenced != nil:
		return pluginkit.DeliverResult{}, pluginkit.Fatal(s.fenced)
	case !s.claimed:
		if err := s.claim(ctx); err != nil {
			if isUnreachable(err) {
				// go-redis's pool keeps answering with its last dial
				// error for a while; a fresh client dials at once on
				// the next attempt.
				s.client.Close()
				s.client = newClient(s.cfg)
			}
			return pluginkit.DeliverResult{}, err
		}
	}
	filter := !b.Replay && s.checkpoint.Filters(b.Epoch)
	if !b.Replay && !filter {
		s.log.Info("first batch of a new epoch (a failover, a restore or a lost slot since the checkpoint): written whole, whatever its ids",
			"first", events[0].ID.String(), "checkpoint", s.checkpoint.ID.String(), "checkpoint_epoch", s.checkpoint.Epoch, "epoch", b.Epoch)
	}
	var res pluginkit.DeliverResult
	refused := map[int]error{}
	fresh := make([]int, 0, len(events)) // indexes of the events to write
	for i, e := range events {
		switch {
		case filter && e.ID.Compare(s.checkpoint.ID) <= 0:
			res.Duplicates++
		case e.Route != "" && s.cfg.streamOf(&e) == s.cfg.checkpointKey:
			refused[i] = pluginkit.Permanent(fmt.Errorf("event %s: route %q makes stream key %q, the sink's checkpoint key: fix the sink's route expression (or set checkpoint_key)",
				e.ID, e.Route, s.cfg.checkpointKey))
		case int64(len(e.Payload)) > s.maxEntry:
			refused[i] = pluginkit.Permanent(fmt.Errorf("event %s (%s.%s) is %d bytes, more than the %d bytes Redis takes in one value (proto-max-bulk-len, or max_entry_bytes); raise both to deliver it",
				e.ID, e.Schema, e.Table, len(e.Payload), s.maxEntry))
		default:
			fresh = append(fresh, i)
		}
	}
	if res.Duplicates > 0 {
		// Only after a crash or a lost answer; worth a line.
		s.log.Info("skipped events already written to Redis", "duplicates", res.Duplicates,
			"first", events[0].ID.String(), "checkpoint", s.checkpoint.ID.String())
	}
	if len(fresh) > 0 {
		cp := s.checkpoint.After(events[fresh[len(fresh)-1]].ID, b.Epoch, b.Replay)
		failed, err := s.write(ctx, events, fresh, cp)
		if err != nil {
			return res, err
		}
		for i, err := range failed {
			refused[i] = err
		}
	}
	return res, batchResult(refused, len(events)-res.Duplicates)
}

// batchResult is nil when nothing was refused, the batch's error when
// every event to write was, else a BatchError naming the refused.
func batchResult(refused map[int]error, tried int) error {
	switch {
	case len(refused) == 0:
		return nil
	case len(refused) == tried:
		for _, err := range refused {
			return err
		}
	}
	return &pluginkit.BatchError{Failed: refused}
}

// write runs the transaction for the events at the indexes fresh, which
// sets the checkpoint to cp, and returns the events whose XADD failed (by
// index in events), or the error of the batch as a whole.
func (s *Sink) write(ctx context.Context, events []pluginkit.Event, fresh []int, cp checkpoint) (map[int]error, error) {
	what := fmt.Sprintf("write %d events %s..%s", len(fresh), events[fresh[0]].ID, events[fresh[len(fresh)-1]].ID)
	var cmds []redis.Cmder
	key := s.cfg.checkpointKey
	err := s.client.Watch(ctx, func(tx *redis.Tx) error {
		epoch, err := tx.HGet(ctx, key, "epoch").Int64()
		if errors.Is(err, redis.Nil) || (err == nil && epoch != s.claimEpoch) {
			return errFenced
		}
		if err != nil {
			return err
		}
		if s.beforeExec != nil {
			if err := s.beforeExec(ctx); err != nil {
				return err
			}
		}
		cmds, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range fresh {
				p.XAdd(ctx, s.xaddArgs(&events[i]))
			}
			p.HSet(ctx, key, "id", cp.ID.String(), "id_epoch", cp.Epoch)
			return nil
		})
		return err
	}, key)
	return s.written(what, events, fresh, cmds, cp, err)
}

// written reads the outcome of write's transaction.
func (s *Sink) written(what string, events []pluginkit.Event, fresh []int, cmds []redis.Cmder, cp checkpoint, err error) (map[int]error, error) {
	switch {
	case errors.Is(err, errFenced), errors.Is(err, redis.TxFailedErr):
		return nil, s.fence(what)
	case redis.IsExecAbortError(err):
		// A command was refused while queued (OOM, NOPERM): nothing ran.
		return nil, s.classify(what, queuedError(cmds, err))
	case err != nil && !isCommandError(cmds, err):
		// The outcome is unknown (the connection broke, the deadline
		// passed): claim again before the next write, which settles it.
		s.claimed = false
		return nil, s.classify(what, err)
	}
	// EXEC ran: the checkpoint moved, and any XADD that failed at run
	// time failed for good (a key of another type): those events are
	// named, and parked by the host, which writes them on replay.
	if err := cmds[len(cmds)-1].Err(); err != nil { // the HSET
		s.claimed = false
		return nil, s.classify(what+": set the checkpoint", err)
	}
	s.checkpoint = cp
	var failed map[int]error
	for j, i := range fresh {
		if err := cmds[j].Err(); err != nil {
			if failed == nil {
				failed = map[int]error{}
			}
			e := &events[i]
			failed[i] = pluginkit.Permanent(fmt.Errorf("XADD event %s to %s: %w", e.ID, s.cfg.streamOf(e), err))
		}
	}
	return failed, nil
}

// isCommandError reports whether err is the error of one command inside a
// transaction that ran (go-redis returns the first one).
func isCommandError(cmds []redis.Cmder, err error) bool {
	for _, c := range cmds {
		if c.Err() == err {
			var rerr redis.Error
			return errors.As(err, &rerr)
		}
	}
	return false
}

// queuedError is the first command's error behind an EXECABORT.
func queuedError(cmds []redis.Cmder, abort error) error {
	for _, c := range cmds {
		if err := c.Err(); err != nil && !redis.IsExecAbortError(err) {
			return fmt.Errorf("%w (%v)", err, abort)
		}
	}
	return abort
}

// xaddArgs is the entry of one event.
func (s *Sink) xaddArgs(e *pluginkit.Event) *redis.XAddArgs {
	key := e.Key
	if len(key) == 0 {
		key = []byte("null")
	}
	a := &redis.XAddArgs{
		Stream: s.cfg.streamOf(e),
		Values: []any{"id", e.ID.String(), "op", string(e.Op), "table", e.Schema + "." + e.Table, "key", key, "event", e.Payload},
	}
	if s.cfg.maxLen > 0 {
		a.MaxLen, a.Approx = s.cfg.maxLen, !s.cfg.maxLenExact
	}
	return a
}

// fence records for good that another sink claimed the checkpoint key:
// this process never writes again.
func (s *Sink) fence(what string) error {
	s.fenced = fmt.Errorf("%s: fenced: another sink claimed checkpoint key %q since this one did (a restarted sink, or a second walcast writing with this key); this one will never write again",
		what, s.cfg.checkpointKey)
	s.log.Error("sink fenced", "checkpoint_key", s.cfg.checkpointKey, "claim_epoch", s.claimEpoch)
	s.claimed = false
	return pluginkit.Fatal(s.fenced)
}
