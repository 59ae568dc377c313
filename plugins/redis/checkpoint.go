package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/walcast/walcast/pluginkit"
)

// The checkpoint key is a hash with two fields:
//
//	epoch  incremented by every Open and reconnect of the sink (the claim)
//	id     the last event id written, set in every batch's MULTI/EXEC
//
// Every Deliver WATCHes the key, checks that epoch is still the one it
// claimed, then runs MULTI/EXEC. A claim modifies the key, so a
// transaction of an older claim — a predecessor process, or this one's
// own request whose answer never came back — either ran before the claim
// (and its id is what the claim reads) or fails at EXEC. That is what
// makes "skip what the checkpoint covers" sound after any failure.

// errFenced is what a Deliver finds when the epoch is no longer its own.
var errFenced = errors.New("another sink claimed the checkpoint key")

// claim checks the server, increments the epoch and reads the checkpoint
// in one transaction, and remembers both.
func (s *Sink) claim(ctx context.Context) error {
	s.claimed = false
	if err := s.checkServer(ctx); err != nil {
		return err
	}
	key := s.cfg.checkpointKey
	var incr *redis.IntCmd
	var get *redis.StringCmd
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		incr = p.HIncrBy(ctx, key, "epoch", 1)
		get = p.HGet(ctx, key, "id")
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return s.classify(fmt.Sprintf("claim checkpoint key %q", key), err)
	}
	cp, err := parseCheckpoint(key, get)
	if err != nil {
		return err
	}
	if cp.Compare(s.checkpoint) < 0 && !s.checkpoint.IsZero() {
		// Only a checkpoint key changed behind our back gets here.
		s.log.Warn("checkpoint key is behind what this process wrote", "read", cp.String(), "written", s.checkpoint.String())
		cp = s.checkpoint
	}
	s.epoch, s.checkpoint, s.claimed = incr.Val(), cp, true
	s.log.Info("redis connected", "address", s.cfg.address, "checkpoint_key", key, "epoch", s.epoch,
		"checkpoint", cp.String(), "max_entry_bytes", s.maxEntry)
	return nil
}

// parseCheckpoint reads the id field; none yet is the zero id.
func parseCheckpoint(key string, get *redis.StringCmd) (pluginkit.EventID, error) {
	v, err := get.Result()
	if errors.Is(err, redis.Nil) || (err == nil && v == "") {
		return pluginkit.EventID{}, nil
	}
	if err != nil {
		return pluginkit.EventID{}, pluginkit.Retryable(fmt.Errorf("read checkpoint %q: %w", key, err))
	}
	id, err := pluginkit.ParseEventID(v)
	if err != nil {
		return pluginkit.EventID{}, pluginkit.Permanent(fmt.Errorf("checkpoint key %q holds id %q, which is not an event id (delete the key only if its streams are empty or new): %w", key, v, err))
	}
	return id, nil
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
