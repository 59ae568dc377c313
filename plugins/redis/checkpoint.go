package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/walcast/walcast/pluginkit"
)

// The checkpoint key is a hash with three fields:
//
//	epoch     the fencing epoch: incremented by every Open and reconnect
//	          of the sink (the claim)
//	id        the last event id written, set in every batch's MULTI/EXEC
//	id_epoch  the epoch of id's series (pluginkit.Batch.Epoch), set with
//	          it; absent when an older sink or host wrote id
//
// Every Deliver WATCHes the key, checks that epoch is still the one it
// claimed, then runs MULTI/EXEC. A claim modifies the key, so a
// transaction of an older claim — a predecessor process, or this one's
// own request whose answer never came back — either ran before the claim
// (and its id is what the claim reads) or fails at EXEC. That is what
// makes "skip what the checkpoint covers" sound after any failure.

// checkpoint is the last event id written and the epoch of the series it
// belongs to (empty when written by a host or a sink that predates
// epochs).
type checkpoint struct {
	id    pluginkit.EventID
	epoch string
}

// filters reports whether the checkpoint says anything about the ids of a
// batch of epoch: an id of another epoch does not (after a failover the
// new primary's ids can be lower than the ones written before), so such a
// batch is written whole. An empty epoch on either side compares equal.
func (c checkpoint) filters(epoch string) bool {
	return epoch == "" || c.epoch == "" || epoch == c.epoch
}

// after is the checkpoint once a batch of epoch whose last written event
// is last has been written. Within an epoch it never moves back; the first
// batch of a new epoch moves it to last, lower or not, with its epoch; an
// empty epoch keeps the stored one. A replay batch (parked events, of
// whatever epoch) moves neither.
func (c checkpoint) after(last pluginkit.EventID, epoch string, replay bool) checkpoint {
	switch {
	case replay:
		return c
	case !c.filters(epoch):
		return checkpoint{id: last, epoch: epoch}
	}
	next := checkpoint{id: c.id, epoch: cmp.Or(epoch, c.epoch)}
	if last.Compare(c.id) > 0 {
		next.id = last
	}
	return next
}

// errFenced is what a Deliver finds when the fencing epoch is no longer
// its own.
var errFenced = errors.New("another sink claimed the checkpoint key")

// claim checks the server, increments the fencing epoch and reads the
// checkpoint in one transaction, and remembers both.
func (s *Sink) claim(ctx context.Context) error {
	s.claimed = false
	if err := s.checkServer(ctx); err != nil {
		return err
	}
	key := s.cfg.checkpointKey
	var incr *redis.IntCmd
	var getID, getEpoch *redis.StringCmd
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		incr = p.HIncrBy(ctx, key, "epoch", 1)
		// Two HGETs rather than an HMGET: the ACL grant the sink asks
		// for (errors.go) names HGET.
		getID = p.HGet(ctx, key, "id")
		getEpoch = p.HGet(ctx, key, "id_epoch")
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return s.classify(fmt.Sprintf("claim checkpoint key %q", key), err)
	}
	cp, err := parseCheckpoint(key, getID, getEpoch)
	if err != nil {
		return err
	}
	if cp.epoch == s.checkpoint.epoch && cp.id.Compare(s.checkpoint.id) < 0 && !s.checkpoint.id.IsZero() {
		// Only a checkpoint key changed behind our back gets here.
		s.log.Warn("checkpoint key is behind what this process wrote", "read", cp.id.String(), "written", s.checkpoint.id.String())
		cp = s.checkpoint
	}
	s.claimEpoch, s.checkpoint, s.claimed = incr.Val(), cp, true
	s.log.Info("redis connected", "address", s.cfg.address, "checkpoint_key", key, "claim_epoch", s.claimEpoch,
		"checkpoint", cp.id.String(), "checkpoint_epoch", cp.epoch, "max_entry_bytes", s.maxEntry)
	return nil
}

// parseCheckpoint reads the id and id_epoch fields; none yet is the zero
// checkpoint, no id_epoch (an older sink's) the empty epoch.
func parseCheckpoint(key string, getID, getEpoch *redis.StringCmd) (checkpoint, error) {
	for _, c := range []*redis.StringCmd{getID, getEpoch} {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return checkpoint{}, pluginkit.Retryable(fmt.Errorf("read checkpoint %q: %w", key, err))
		}
	}
	cp := checkpoint{epoch: getEpoch.Val()} // "" when the field is not set
	raw := getID.Val()
	if raw == "" {
		return cp, nil
	}
	id, err := pluginkit.ParseEventID(raw)
	if err != nil {
		return checkpoint{}, pluginkit.Permanent(fmt.Errorf("checkpoint key %q holds id %q, which is not an event id (delete the key only if its streams are empty or new): %w", key, raw, err))
	}
	cp.id = id
	return cp, nil
}

// checkServer refuses what the sink cannot work with, warns about what
// weakens the guarantee, and learns the largest value one command may
// carry. It needs INFO; CONFIG GET may be refused (a managed Redis).
func (s *Sink) checkServer(ctx context.Context) error {
	info, err := s.client.Info(ctx, "server", "persistence", "cluster", "replication").Result()
	if err != nil {
		return s.classify("connect to "+s.cfg.address, err)
	}
	fields := infoFields(info)
	if fields["cluster_enabled"] == "1" {
		return pluginkit.Permanent(fmt.Errorf("%s is a Redis Cluster node: a transaction can only write keys of one hash slot, so the redis sink needs a standalone Redis or a primary of a replicated one", s.cfg.address))
	}
	if fields["role"] == "slave" {
		return pluginkit.Retryable(fmt.Errorf("%s is a read-only replica: point address at the primary", s.cfg.address))
	}
	if fields["aof_enabled"] != "1" {
		s.log.Warn("Redis appendonly is off: a Redis crash loses what was written since its last RDB snapshot, entries and checkpoint together, and walcast does not send those events again (it has their acks); set appendonly yes (appendfsync always to lose nothing)",
			"address", s.cfg.address, "redis_version", fields["redis_version"])
	}
	s.maxEntry = s.cfg.maxEntryBytes
	if !s.cfg.maxEntrySet {
		if v, err := s.client.ConfigGet(ctx, "proto-max-bulk-len").Result(); err == nil {
			if n, err := strconv.ParseInt(v["proto-max-bulk-len"], 10, 64); err == nil && n > 0 {
				s.maxEntry = n
			}
		}
	}
	return nil
}

// infoFields parses INFO's "name:value" lines.
func infoFields(info string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out
}
