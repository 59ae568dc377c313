package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/walcast/walcast/pluginkit"
)

// dialTimeout bounds connecting to the broker, TCP, TLS and AMQP handshake
// together (amqp091 takes no context for it).
const dialTimeout = 10 * time.Second

// closeTimeout bounds closing the connection.
const closeTimeout = 5 * time.Second

// Sink publishes events to a RabbitMQ exchange.
type Sink struct {
	log *slog.Logger

	mu         sync.Mutex // guards everything below
	cfg        settings
	configured bool
	opened     bool
	conn       *amqp.Connection // nil or closed: the next Deliver connects
	idle       []*pubChannel    // channels in confirm mode, not in use
	// limit is the broker's max_message_size once the broker told us
	// (by closing a channel over a larger message); 0 before.
	limit   int64
	blocked *amqp.Blocking // the broker's last word on blocking publishers
}

// pubChannel is a channel in confirm mode and what it reports.
type pubChannel struct {
	ch      *amqp.Channel
	returns chan amqp.Return // mandatory messages no queue took
	closed  chan *amqp.Error // why the broker closed the channel
}

// Interface guards.
var _ pluginkit.BatchSink = (*Sink)(nil)

// New returns a RabbitMQ sink that logs through pluginkit.NewLogger.
func New() *Sink { return newSink(pluginkit.NewLogger()) }

func newSink(log *slog.Logger) *Sink { return &Sink{log: log} }

// Info describes the sink. Batches of different rows are published in
// parallel, each on its own channel; a row's changes are never in two
// batches at once (the host's lanes), and one channel keeps publish order.
// Routes: the route is the routing key.
func (s *Sink) Info() pluginkit.Info {
	return pluginkit.Info{Name: "rabbitmq", Version: pluginkit.BuildVersion(), Config: configFields, Routes: true}
}

// Configure validates the config; it contacts no broker.
func (s *Sink) Configure(_ context.Context, setup pluginkit.Setup) error {
	st, err := decodeConfig(setup.Config, setup.Sink)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg, s.configured = st, true
	s.log.Info("rabbitmq configured", "broker", st.broker, "user", st.user, "exchange", st.exchange,
		"routing_key", st.routingKey, "mandatory", st.mandatory, "tls", st.tls != nil)
	return nil
}

// Open connects and declares the exchange. A broker that cannot be
// reached does not fail Open (deliveries retry until it answers); one that
// refuses the credentials, the vhost or the exchange does: that is a
// mistake to fix before anything streams. ctx is the host's open deadline.
func (s *Sink) Open(ctx context.Context) (pluginkit.OpenResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.configured {
		return pluginkit.OpenResult{}, pluginkit.Permanent(errors.New("open before configure"))
	}
	s.opened = true
	err := s.connect(ctx)
	if err == nil {
		return pluginkit.OpenResult{}, nil
	}
	if unreachable(err) {
		s.log.Warn("broker unreachable at start; deliveries retry until it answers", "broker", s.cfg.broker, "err", err)
		return pluginkit.OpenResult{}, nil
	}
	return pluginkit.OpenResult{}, pluginkit.Permanent(s.classify("connect to the broker", err))
}

// connect opens a connection unless one is open, and declares the
// exchange; callers hold s.mu.
func (s *Sink) connect(ctx context.Context) error {
	if s.conn != nil && !s.conn.IsClosed() {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.dropConn()
	conn, err := withContext(ctx, s.dial, func(c *amqp.Connection) { c.Close() })
	if err != nil {
		return err
	}
	blocked := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	go s.watchBlocked(blocked)
	s.conn = conn
	s.log.Info("rabbitmq connected", "broker", s.cfg.broker, "exchange", s.cfg.exchange)
	return nil
}

// dial connects and declares the exchange, or with declare_exchange =
// false checks that it exists: publishing to a missing exchange would only
// fail later, batch after batch, when the broker closes the channel.
func (s *Sink) dial() (*amqp.Connection, error) {
	conn, err := amqp.DialConfig(s.cfg.url, amqp.Config{
		TLSClientConfig: s.cfg.tls,
		Heartbeat:       10 * time.Second,
		Properties:      amqp.Table{"connection_name": s.cfg.name},
		Dial:            amqp.DefaultDial(dialTimeout),
	})
	if err != nil || s.cfg.exchange == "" {
		return conn, err
	}
	ch, err := conn.Channel()
	what := fmt.Sprintf("declare exchange %q (%s, durable)", s.cfg.exchange, s.cfg.exchangeType)
	if err == nil && s.cfg.declare {
		err = ch.ExchangeDeclare(s.cfg.exchange, s.cfg.exchangeType, true, false, false, false, nil)
	} else if err == nil {
		what = fmt.Sprintf("check that exchange %q exists", s.cfg.exchange)
		err = ch.ExchangeDeclarePassive(s.cfg.exchange, s.cfg.exchangeType, true, false, false, false, nil)
	}
	if err == nil {
		ch.Close()
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return conn, nil
}

// watchBlocked remembers whether the broker blocks publishers (a memory or
// disk alarm), so that a Deliver that times out can say why. It ends when
// the connection closes.
func (s *Sink) watchBlocked(c <-chan amqp.Blocking) {
	for b := range c {
		s.mu.Lock()
		s.blocked = &b
		s.mu.Unlock()
		if b.Active {
			s.log.Warn("the broker blocks publishers", "reason", b.Reason)
		}
	}
}

// dropConn closes the connection and forgets its channels; callers hold
// s.mu.
func (s *Sink) dropConn() {
	if s.conn != nil {
		// A broker that stopped answering would hold Close forever.
		s.conn.CloseDeadline(time.Now().Add(closeTimeout))
	}
	s.conn, s.idle, s.blocked = nil, nil, nil
}

// channel takes an idle channel or opens one, connecting first if needed.
func (s *Sink) channel(ctx context.Context) (*pubChannel, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.opened {
		return nil, pluginkit.Permanent(errors.New("deliver before open"))
	}
	for len(s.idle) > 0 {
		pc := s.idle[len(s.idle)-1]
		s.idle = s.idle[:len(s.idle)-1]
		if !pc.ch.IsClosed() {
			return pc, nil
		}
	}
	if err := s.connect(ctx); err != nil {
		return nil, s.classify("connect to the broker", err)
	}
	conn := s.conn
	pc, err := withContext(ctx, func() (*pubChannel, error) { return newPubChannel(conn) }, discard)
	if err != nil {
		if ctx.Err() == nil {
			s.dropConn()
		}
		return nil, s.classify("open a channel in confirm mode", err)
	}
	return pc, nil
}

func newPubChannel(conn *amqp.Connection) (*pubChannel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		ch.Close()
		return nil, err
	}
	return &pubChannel{
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, 64)),
		closed:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}, nil
}

// withContext runs f, which takes no context (amqp091's dial and channel
// calls wait for the broker), and gives up when ctx ends; whatever f
// still returns then is undone.
func withContext[T any](ctx context.Context, f func() (T, error), undo func(T)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.err == nil {
				undo(r.v)
			}
		}()
		var zero T
		return zero, ctx.Err()
	}
}

// release gives a healthy channel back.
func (s *Sink) release(pc *pubChannel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idle = append(s.idle, pc)
}

// discard closes a channel that failed. Closing waits for the broker's
// answer, which a broker that stopped answering never gives: the goroutine
// ends when the broker answers or the connection closes.
func discard(pc *pubChannel) {
	go pc.ch.Close()
}

// Close closes the connection; its channels go with it.
func (s *Sink) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropConn()
	s.opened = false
	return nil
}
