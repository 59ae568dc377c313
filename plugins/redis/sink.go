package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/walcast/walcast/pluginkit"
)

// defaultBatchSize is the batch size this sink asks for when the pipeline
// sets none: one transaction is one round trip, batches go one at a time,
// so larger batches cost little latency and save round trips.
const defaultBatchSize = 1000

// Sink writes batches to Redis streams. The host calls it one batch at a
// time (Info.Ordered); the lock still serialises every call, because Serve
// may call Close on its own when the host goes away mid-Deliver.
type Sink struct {
	log *slog.Logger
	// lock is a one-slot semaphore rather than a sync.Mutex so that a
	// caller can give up waiting when its context ends.
	lock chan struct{}

	// Everything below is guarded by lock.
	cfg        settings
	configured bool
	client     *redis.Client // nil before Open and after Close
	// claimed: the epoch was claimed and the checkpoint read on the
	// current connections. It is cleared whenever a transaction's outcome
	// is unknown; the next Deliver claims again, which settles it.
	claimed bool
	// claimEpoch is the fencing epoch (the key's epoch field) this sink
	// claimed; not to be confused with the epoch of the ids (Batch.Epoch).
	claimEpoch int64
	// checkpoint is the last event id known to be written, with its
	// epoch. Events at or below it are duplicates, in a batch of its
	// epoch.
	checkpoint checkpoint
	// maxEntry is the largest event sent; larger ones are refused.
	maxEntry int64
	// fenced is set once another sink took the checkpoint key over; from
	// then on nothing is written, ever.
	fenced error

	// beforeExec, when set (tests only), runs after the epoch check and
	// before MULTI/EXEC is sent.
	beforeExec func(ctx context.Context) error
}

// Interface guards.
var _ pluginkit.BatchSink = (*Sink)(nil)

// New returns a Redis sink that logs through pluginkit.NewLogger.
func New() *Sink { return newSink(pluginkit.NewLogger()) }

func newSink(log *slog.Logger) *Sink {
	return &Sink{log: log, lock: make(chan struct{}, 1)}
}

func (s *Sink) acquire(ctx context.Context) error {
	select {
	case s.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return pluginkit.Retryable(fmt.Errorf("wait for the sink's previous call: %w", ctx.Err()))
	}
}

func (s *Sink) release() { <-s.lock }

// Info describes the sink. Ordered: filtering at or below the checkpoint
// is only sound when batches commit in id order. Routes: the route names
// the stream under stream_prefix; one checkpoint covers every stream,
// since a batch's entries, whatever their streams, and the checkpoint are
// written in one MULTI/EXEC.
func (s *Sink) Info() pluginkit.Info {
	return pluginkit.Info{
		Name:      "redis",
		Version:   pluginkit.BuildVersion(),
		Config:    configFields,
		Ordered:   true,
		BatchSize: defaultBatchSize,
		Routes:    true,
	}
}

// Configure validates the config and every table's stream key; it
// contacts no server.
func (s *Sink) Configure(ctx context.Context, setup pluginkit.Setup) error {
	st, err := decodeConfig(setup.Config, setup.Sink, setup.Tables)
	if err != nil {
		return err
	}
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.release()
	s.cfg, s.configured = st, true
	s.log.Info("redis configured", "address", st.address, "db", st.db, "stream_prefix", st.streamPrefix,
		"checkpoint_key", st.checkpointKey, "maxlen", st.maxLen, "tls", st.tls != nil, "username", st.username)
	return nil
}

// Open connects, claims the checkpoint key and reads the checkpoint back.
// A server that cannot be reached is not an error here: walcast starts,
// and every Deliver tries again (retryable, naming the cause) until the
// server answers; the sink then filters what its checkpoint covers. A
// server that answers and refuses (authentication, a Redis Cluster, a
// corrupt checkpoint) fails Open: that needs a change, not a retry.
// ctx is the host's open deadline.
func (s *Sink) Open(ctx context.Context) (pluginkit.OpenResult, error) {
	if err := s.acquire(ctx); err != nil {
		return pluginkit.OpenResult{}, err
	}
	defer s.release()
	if !s.configured {
		return pluginkit.OpenResult{}, pluginkit.Permanent(errors.New("open before configure"))
	}
	if s.client == nil {
		s.client = newClient(s.cfg)
	}
	err := s.claim(ctx)
	switch {
	case err == nil:
		return pluginkit.OpenResult{Checkpoint: s.checkpoint.ID, Epoch: s.checkpoint.Epoch}, nil
	case isUnreachable(err) || errors.Is(err, context.DeadlineExceeded):
		s.log.Warn("redis unreachable at start; deliveries retry until it answers", "address", s.cfg.address, "err", err)
		return pluginkit.OpenResult{}, nil
	}
	s.client.Close()
	s.client = nil
	return pluginkit.OpenResult{}, err
}

func newClient(st settings) *redis.Client {
	opts := &redis.Options{
		Addr:     st.address,
		Username: st.username,
		Password: st.password,
		DB:       st.db,
		// RESP2: every Redis since 2.6 speaks it, and AUTH user pass
		// covers ACL users.
		Protocol:     2,
		DialTimeout:  st.timeout,
		ReadTimeout:  st.timeout,
		WriteTimeout: st.timeout,
		// The host's deadline for each call reaches the socket.
		ContextTimeoutEnabled: true,
		// Never resend a command: a MULTI/EXEC resent after a lost answer
		// could apply twice. The host retries the batch instead, and the
		// checkpoint read on reconnect settles what landed.
		MaxRetries:               -1,
		PoolSize:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	if st.tls != nil {
		opts.TLSConfig = st.tls.Clone()
	}
	return redis.NewClient(opts)
}

// Close disconnects. A transaction is never open between calls.
func (s *Sink) Close(ctx context.Context) error {
	if err := s.acquire(ctx); err != nil {
		return err
	}
	defer s.release()
	if s.client != nil {
		s.client.Close()
		s.client = nil
	}
	s.claimed = false
	return nil
}
