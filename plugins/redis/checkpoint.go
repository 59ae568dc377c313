package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/plugins/internal/epochs"
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

// checkpoint is the last event id this sink wrote and the epoch of the
// batch that wrote it; epochs.Checkpoint says what it covers.
type checkpoint = epochs.Checkpoint

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
	if cp.Epoch == s.checkpoint.Epoch && cp.ID.Compare(s.checkpoint.ID) < 0 && !s.checkpoint.ID.IsZero() {
		// Only a checkpoint key changed behind our back gets here.
		s.log.Warn("checkpoint key is behind what this process wrote", "read", cp.ID.String(), "written", s.checkpoint.ID.String())
		cp = s.checkpoint
	}
	s.claimEpoch, s.checkpoint, s.claimed = incr.Val(), cp, true
	s.log.Info("redis connected", "address", s.cfg.address, "checkpoint_key", key, "claim_epoch", s.claimEpoch,
		"checkpoint", cp.ID.String(), "checkpoint_epoch", cp.Epoch, "max_entry_bytes", s.maxEntry)
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
	cp := checkpoint{Epoch: getEpoch.Val()} // "" when the field is not set
	raw := getID.Val()
	if raw == "" {
		return cp, nil
	}
	id, err := pluginkit.ParseEventID(raw)
	if err != nil {
		return checkpoint{}, pluginkit.Permanent(fmt.Errorf("checkpoint key %q holds id %q, which is not an event id (delete the key only if its streams are empty or new): %w", key, raw, err))
	}
	cp.ID = id
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
