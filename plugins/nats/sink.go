package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/walcast/walcast/pluginkit"
)

// maxPending bounds the publishes awaiting their ack, over every batch in
// flight: the host's largest batches (10,000) times a few in flight.
const maxPending = 1 << 16

// Sink publishes batches to JetStream. Deliver may run concurrently for
// batches of different rows (the host's max_in_flight): publishing is
// safe for concurrent use, and the stream's duplicate window, not an
// order of batches, is what recognises a redelivery.
type Sink struct {
	log *slog.Logger

	mu         sync.Mutex // guards everything below
	cfg        settings
	tables     []string // the "schema.table" names the host said the sink gets
	configured bool
	nc         *nats.Conn // nil before Open and after Close
	js         jetstream.JetStream
	// ready: the stream was found (or created) and its duplicate window
	// checked, on a connection that answered. Until then every Deliver
	// tries again.
	ready bool
	// window is the stream's duplicate window, as read when ready.
	window time.Duration
	// recheck is set by the client when it reconnects: the stream may
	// have changed (or been recreated) meanwhile.
	recheck atomic.Bool
}

// Interface guards.
var _ pluginkit.BatchSink = (*Sink)(nil)

// New returns a NATS sink that logs through pluginkit.NewLogger.
func New() *Sink { return newSink(pluginkit.NewLogger()) }

func newSink(log *slog.Logger) *Sink { return &Sink{log: log} }

// Info describes the sink. Not ordered: the duplicate window recognises a
// redelivery whatever order batches come in, and the host never has two
// changes of one row in flight at once, so a row's changes are stored in
// commit order. Routes: the route is the subject under subject_prefix.
func (s *Sink) Info() pluginkit.Info {
	return pluginkit.Info{Name: "nats", Version: pluginkit.BuildVersion(), Config: configFields, Routes: true}
}

// Configure validates the config and every table's subject; it contacts
// no server.
func (s *Sink) Configure(_ context.Context, setup pluginkit.Setup) error {
	st, err := decodeConfig(setup.Config, setup.Sink, setup.Tables)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg, s.tables, s.configured = st, setup.Tables, true
	s.log.Info("nats configured", "servers", redactAll(st.servers), "stream", st.stream, "subject_prefix", st.subjectPrefix,
		"min_duplicate_window", st.minWindow.String(), "create_stream", st.create, "tls", st.tls != nil)
	return nil
}

// Open connects, then finds or creates the stream and checks its
// duplicate window. Servers that cannot be reached are not an error here:
// walcast starts, the client keeps reconnecting, and every Deliver fails
// retryably, naming the cause, until a server answers and the stream
// checks pass. A server that answers and refuses (authentication, TLS), a
// missing stream that may not be created, a stream that does not take
// the sink's subjects or deduplicates over less than
// min_duplicate_window fail Open: those need a change, not a retry.
func (s *Sink) Open(ctx context.Context) (pluginkit.OpenResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.configured {
		return pluginkit.OpenResult{}, pluginkit.Permanent(errors.New("open before configure"))
	}
	if s.nc == nil {
		if err := s.connect(ctx); err != nil {
			return pluginkit.OpenResult{}, err
		}
	}
	if !s.nc.IsConnected() {
		return pluginkit.OpenResult{}, nil // connect logged why
	}
	if err := s.prepare(ctx); err != nil {
		if isTransient(err) {
			s.log.Warn("JetStream not ready at start; deliveries retry until it is", "err", err)
			return pluginkit.OpenResult{}, nil
		}
		return pluginkit.OpenResult{}, err
	}
	return pluginkit.OpenResult{}, nil
}

// connect dials the servers. When none can be reached it still returns a
// connection, which keeps trying in the background.
func (s *Sink) connect(ctx context.Context) error {
	opts, err := s.options()
	if err != nil {
		return err
	}
	url := strings.Join(s.cfg.servers, ",")
	nc, err := nats.Connect(url, opts...)
	if err != nil && isUnreachable(err) {
		s.log.Warn("NATS unreachable at start; deliveries retry until it answers", "servers", redactAll(s.cfg.servers), "err", err)
		nc, err = nats.Connect(url, append(opts, nats.RetryOnFailedConnect(true))...)
	}
	if err != nil {
		return s.classify("connect to NATS", err)
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(maxPending),
		jetstream.WithPublishAsyncTimeout(s.cfg.ackTimeout),
		jetstream.WithDefaultTimeout(s.cfg.timeout))
	if err != nil {
		nc.Close()
		return pluginkit.Permanent(fmt.Errorf("JetStream context: %w", err))
	}
	s.nc, s.js = nc, js
	return ctx.Err()
}

// options are the connection's options: name, timeouts, reconnecting for
// ever, authentication and TLS.
func (s *Sink) options() ([]nats.Option, error) {
	st := s.cfg
	opts := []nats.Option{
		nats.Name(st.name),
		nats.Timeout(st.timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		// No buffering while disconnected: a publish then fails at once
		// and the batch is retried, rather than being sent later
		// behind the sink's back.
		nats.ReconnectBufSize(-1),
		nats.NoCallbacksAfterClientClose(),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				s.log.Warn("disconnected from NATS", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			s.log.Info("reconnected to NATS", "server", redactURL(nc.ConnectedUrl()))
			s.recheck.Store(true)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { s.log.Warn("NATS error", "err", err) }),
	}
	switch {
	case st.username != "":
		opts = append(opts, nats.UserInfo(st.username, st.password))
	case st.token != "":
		opts = append(opts, nats.Token(st.token))
	case st.credsFile != "":
		opts = append(opts, nats.UserCredentials(st.credsFile))
	case st.nkeySeedFile != "":
		o, err := nats.NkeyOptionFromSeed(st.nkeySeedFile)
		if err != nil {
			return nil, &pluginkit.ConfigError{Field: "nkey_seed_file", Msg: err.Error()}
		}
		opts = append(opts, o)
	}
	if st.tls != nil {
		opts = append(opts, nats.Secure(st.tls.Clone()))
	}
	return opts, nil
}

// Close drains nothing (every Deliver waited for its acks) and
// disconnects.
func (s *Sink) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.nc != nil {
		s.nc.Close()
		s.nc, s.js, s.ready = nil, nil, false
	}
	return nil
}

// redactAll cuts each URL to scheme and host.
func redactAll(urls []string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = redactURL(u)
	}
	return out
}
