package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/pluginkit"
)

// openAttempt bounds Open's first contact with the target: a target that
// is down at start does not stop walcast (deliveries retry until it is
// up), so Open does not wait for it longer than this.
const openAttempt = 10 * time.Second

// Sink writes events into a PostgreSQL database.
type Sink struct {
	log *slog.Logger

	mu         sync.Mutex // guards everything below
	cfg        settings
	configured bool
	pool       *pgxpool.Pool // nil before Open and after Close
	// prepared: the sink's own tables exist and, in mirror mode, its
	// checkpoint row; set by the first successful contact with the target.
	prepared bool
	tables   map[qname]*table // mirror: target tables as last read
}

// Interface guards.
var _ pluginkit.BatchSink = (*Sink)(nil)

// New returns a PostgreSQL sink that logs through pluginkit.NewLogger.
func New() *Sink { return newSink(pluginkit.NewLogger()) }

func newSink(log *slog.Logger) *Sink { return &Sink{log: log, tables: map[qname]*table{}} }

// Info describes the sink. It asks for ordered delivery: mirror mode's
// checkpoint, stored with the rows, makes everything at or below it a
// duplicate, which holds only when batches commit in id order. (History
// mode would not need it, its primary key recognises every duplicate, but
// Info is read before Configure, so it cannot depend on the mode.)
func (s *Sink) Info() pluginkit.Info {
	return pluginkit.Info{
		Name:      "postgres",
		Version:   pluginkit.BuildVersion(),
		Config:    configFields,
		Ordered:   true,
		BatchSize: defaultBatchSize,
	}
}

// Configure validates the config and the target names of the tables; it
// contacts no server.
func (s *Sink) Configure(_ context.Context, setup pluginkit.Setup) error {
	st, err := decodeConfig(setup.Config, setup.Sink, setup.Tables)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg, s.configured = st, true
	s.log.Info("postgres configured", "target", st.target, "mode", st.mode, "user", st.pool.ConnConfig.User,
		"tls", st.pool.ConnConfig.TLSConfig != nil, "create_tables", st.create)
	return nil
}

// Open creates the connection pool and makes first contact: the sink's own
// tables, and in mirror mode its checkpoint, which it reports so that the
// host skips what the target already holds. A target that cannot be
// reached does not fail Open: the sink then prepares on the first Deliver
// and filters by its checkpoint there. A target that refuses the
// credentials, lacks the database or a required table does: that is a
// mistake to fix before anything streams. ctx is the host's open deadline.
func (s *Sink) Open(ctx context.Context) (pluginkit.OpenResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.configured {
		return pluginkit.OpenResult{}, pluginkit.Permanent(errors.New("open before configure"))
	}
	if s.pool == nil {
		pool, err := pgxpool.NewWithConfig(context.WithoutCancel(ctx), s.cfg.pool.Copy())
		if err != nil {
			return pluginkit.OpenResult{}, pluginkit.Permanent(fmt.Errorf("create connection pool for %s: %w", s.cfg.target, err))
		}
		s.pool = pool
	}
	actx, cancel := context.WithTimeout(ctx, openAttempt)
	defer cancel()
	cp, err := s.prepare(actx)
	if err == nil {
		return pluginkit.OpenResult{Checkpoint: cp.ID, Epoch: cp.Epoch}, nil
	}
	if unreachable(err) || errors.Is(err, context.DeadlineExceeded) {
		s.log.Warn("target database unreachable at start; deliveries retry until it answers", "target", s.cfg.target, "err", err)
		return pluginkit.OpenResult{}, nil
	}
	return pluginkit.OpenResult{}, pluginkit.Permanent(s.classify("open the target database", err))
}

// prepare creates the sink's own tables and reads the checkpoint (mirror
// mode); callers hold s.mu.
func (s *Sink) prepare(ctx context.Context) (checkpoint, error) {
	var cp checkpoint
	var err error
	if s.cfg.mode == modeHistory {
		err = createHistoryTable(ctx, s.pool, s.cfg.historyTable)
	} else {
		cp, err = s.prepareMirror(ctx)
	}
	if err != nil {
		return cp, err
	}
	s.prepared = true
	s.log.Info("postgres connected", "target", s.cfg.target, "mode", s.cfg.mode, "checkpoint", cp.ID.String(), "epoch", cp.Epoch)
	return cp, nil
}

// ready prepares the sink if Open could not.
func (s *Sink) ready(ctx context.Context) (*pgxpool.Pool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pool == nil {
		return nil, pluginkit.Permanent(errors.New("deliver before open"))
	}
	if !s.prepared {
		if _, err := s.prepare(ctx); err != nil {
			return nil, s.classify("prepare the target database", err)
		}
	}
	return s.pool, nil
}

// Deliver writes the batch in one transaction. In mirror mode, nil means
// committed along with the checkpoint; a *pluginkit.BatchError names the
// first event the target refused, the events before it being committed
// (every later one is delivered again: Info.Ordered). ctx ends at the
// sink's deliver_timeout.
func (s *Sink) Deliver(ctx context.Context, b pluginkit.Batch) (pluginkit.DeliverResult, error) {
	if len(b.Events) == 0 {
		return pluginkit.DeliverResult{}, nil
	}
	pool, err := s.ready(ctx)
	if err != nil {
		return pluginkit.DeliverResult{}, err
	}
	if s.cfg.mode == modeHistory {
		return s.deliverHistory(ctx, pool, b)
	}
	return s.deliverMirror(ctx, pool, b)
}

// table returns the target table name as last read from the catalog, nil
// when it does not exist.
func (s *Sink) table(ctx context.Context, name qname) (*table, error) {
	s.mu.Lock()
	t, ok := s.tables[name]
	pool := s.pool
	s.mu.Unlock()
	if ok {
		return t, nil
	}
	t, err := loadTable(ctx, pool, name)
	if err != nil || t == nil {
		return nil, err
	}
	s.mu.Lock()
	s.tables[name] = t
	s.mu.Unlock()
	return t, nil
}

// forget drops what the sink knows of a table, after DDL or an error that
// says the catalog changed.
func (s *Sink) forget(name qname) {
	s.mu.Lock()
	delete(s.tables, name)
	s.mu.Unlock()
}

// forgetAll drops every table read from the catalog.
func (s *Sink) forgetAll() {
	s.mu.Lock()
	clear(s.tables)
	s.mu.Unlock()
}

// Close closes the pool; it waits for connections in use, whose calls end
// with their contexts.
func (s *Sink) Close(context.Context) error {
	s.mu.Lock()
	pool := s.pool
	s.pool, s.prepared = nil, false
	s.mu.Unlock()
	if pool != nil {
		pool.Close()
	}
	return nil
}
