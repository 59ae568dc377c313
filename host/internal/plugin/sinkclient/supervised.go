package sinkclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/walcast/walcast/host/internal/delivery/schedule/attempt"
	"github.com/walcast/walcast/pluginkit"
)

// Restart backoff: the first relaunch after a crash waits restartBackoffMin,
// each further consecutive failure doubles the wait, up to
// restartBackoffMax. A Deliver that succeeds resets it.
const (
	restartBackoffMin = 100 * time.Millisecond
	restartBackoffMax = 10 * time.Second
)

// killTimeout bounds the Close sent to a plugin before it is killed.
const killTimeout = 5 * time.Second

// Supervised keeps one sink plugin running. It remembers the sink's config
// and, when a Deliver fails because the process died, reports that batch as
// retryable and, on the next call, relaunches the plugin (with exponential
// backoff across consecutive failures), configures and opens it again.
//
// Methods may be called concurrently.
type Supervised struct {
	cfg        Config
	sinkConfig json.RawMessage
	log        *slog.Logger
	info       pluginkit.Info

	// lock serialises relaunches; a channel rather than a sync.Mutex so
	// that waiting for it honours the caller's context.
	lock chan struct{}

	mu        sync.Mutex
	p         *Plugin // nil while dead
	open      pluginkit.OpenResult
	failures  int       // consecutive deaths and failed relaunches
	notBefore time.Time // earliest next relaunch
	restarts  int
	closed    bool
}

// Start launches the plugin at cfg.Path, configures it with sinkConfig and
// opens it. Errors here are returned as they are (a config error should
// stop walcast, not be retried). ctx bounds the start only.
func Start(ctx context.Context, cfg Config, sinkConfig json.RawMessage) (*Supervised, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Supervised{
		cfg:        cfg,
		sinkConfig: sinkConfig,
		log:        log.With("sink", cfg.SinkID),
		lock:       make(chan struct{}, 1),
	}
	p, info, open, err := s.launch(ctx)
	if err != nil {
		return nil, err
	}
	s.p, s.info, s.open = p, info, open
	return s, nil
}

// launch starts a process and brings it to the open state, killing it on
// any failure.
func (s *Supervised) launch(ctx context.Context) (*Plugin, pluginkit.Info, pluginkit.OpenResult, error) {
	p, err := Launch(ctx, s.cfg)
	if err != nil {
		return nil, pluginkit.Info{}, pluginkit.OpenResult{}, err
	}
	info, err := p.Info(ctx)
	if err == nil {
		err = p.Configure(ctx, s.sinkConfig)
	}
	var open pluginkit.OpenResult
	if err == nil {
		open, err = p.Open(ctx)
	}
	if err != nil {
		p.Kill()
		return nil, pluginkit.Info{}, pluginkit.OpenResult{}, fmt.Errorf("start sink %s: %w", s.cfg.SinkID, err)
	}
	return p, info, open, nil
}

// Info returns the plugin's description from the first start.
func (s *Supervised) Info() pluginkit.Info { return s.info }

// OpenResult returns what the latest Open reported. It changes after a
// relaunch when the destination keeps its own checkpoint.
func (s *Supervised) OpenResult() pluginkit.OpenResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open
}

// Pid returns the process id of the running plugin, or 0 while it is dead.
func (s *Supervised) Pid() int {
	s.mu.Lock()
	p := s.p
	s.mu.Unlock()
	if p == nil {
		return 0
	}
	return p.Pid()
}

// Restarts returns how many times the plugin was relaunched.
func (s *Supervised) Restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts
}

// Deliver hands one batch to the plugin, relaunching it first if it died.
// A batch that fails because the process died, or because it cannot be
// relaunched yet, gets a retryable error: deliver it again.
func (s *Supervised) Deliver(ctx context.Context, b attempt.Batch) (attempt.Result, error) {
	p, err := s.running(ctx)
	if err != nil {
		return attempt.Result{}, err
	}
	res, err := p.Deliver(ctx, b)
	if err == nil {
		s.mu.Lock()
		if s.p == p {
			s.failures = 0
		}
		s.mu.Unlock()
		return res, nil
	}
	if !p.alive(ctx) {
		s.buried(p)
		return res, attempt.Retryable(fmt.Errorf("plugin process died: %w", err))
	}
	return res, err
}

// running returns a live plugin, relaunching a dead one once its backoff
// has passed.
func (s *Supervised) running(ctx context.Context) (*Plugin, error) {
	s.mu.Lock()
	p, closed := s.p, s.closed
	s.mu.Unlock()
	switch {
	case closed:
		return nil, attempt.Permanent(errors.New("sink plugin supervisor closed"))
	case p != nil && !p.Exited():
		return p, nil
	case p != nil:
		s.buried(p)
	}

	select {
	case s.lock <- struct{}{}:
		defer func() { <-s.lock }()
	case <-ctx.Done():
		return nil, attempt.Retryable(fmt.Errorf("wait for plugin restart: %w", ctx.Err()))
	}

	// Another caller may have relaunched it while we waited.
	s.mu.Lock()
	p, closed, notBefore := s.p, s.closed, s.notBefore
	s.mu.Unlock()
	if closed {
		return nil, attempt.Permanent(errors.New("sink plugin supervisor closed"))
	}
	if p != nil {
		return p, nil
	}

	if wait := time.Until(notBefore); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, attempt.Retryable(fmt.Errorf("wait for plugin restart backoff: %w", ctx.Err()))
		}
	}

	s.log.Info("restarting sink plugin")
	p, _, open, err := s.launch(ctx)
	s.mu.Lock()
	if err != nil {
		s.failures++
		wait := backoff(s.failures)
		s.notBefore = time.Now().Add(wait)
		s.mu.Unlock()
		s.log.Warn("sink plugin restart failed", "err", err, "retry_in", wait.String())
		return nil, attempt.Retryable(fmt.Errorf("restart: %w", err))
	}
	if s.closed {
		// Close ran while we were launching.
		s.mu.Unlock()
		p.Kill()
		return nil, attempt.Permanent(errors.New("sink plugin supervisor closed"))
	}
	s.p, s.open = p, open
	s.restarts++
	s.mu.Unlock()
	return p, nil
}

// buried records that p died: the next call relaunches after the backoff.
func (s *Supervised) buried(p *Plugin) {
	s.mu.Lock()
	if s.p != p {
		s.mu.Unlock()
		return // somebody else already did
	}
	s.p = nil
	s.failures++
	s.notBefore = time.Now().Add(backoff(s.failures))
	s.mu.Unlock()
	pid := p.Pid()
	// Reap the process and go-plugin's goroutines; the process may also be
	// alive but unreachable, in which case this kills it.
	p.Kill()
	// The one line about the death (go-plugin's own is at debug), with
	// how the process ended when it had already exited.
	if how := p.exitError(); how != "" {
		s.log.Warn("sink plugin process died", "pid", pid, "exit", how)
	} else {
		s.log.Warn("sink plugin process died", "pid", pid)
	}
}

// backoff is the wait before relaunch number n (n ≥ 1) in a row.
func backoff(n int) time.Duration {
	d := restartBackoffMin
	for i := 1; i < n && d < restartBackoffMax; i++ {
		d *= 2
	}
	return min(d, restartBackoffMax)
}

// Close closes the sink and ends the plugin process. Later calls fail
// permanently.
func (s *Supervised) Close(ctx context.Context) error {
	s.mu.Lock()
	p := s.p
	s.p, s.closed = nil, true
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, killTimeout)
	defer cancel()
	err := p.Close(ctx)
	p.Kill()
	return err
}
