package leader

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/host/internal/pg"
)

// Config says which pipeline to lead and how quickly to notice changes.
type Config struct {
	// DSN is the source database.
	DSN string
	// Pipeline names the lock: one lock per pipeline name.
	Pipeline string
	// Holder describes this process to standbys and `walcast status`
	// (default "walcast <hostname> pid <pid>"). It is the lock session's
	// application_name, so it must fit in 63 bytes.
	Holder string
	// PollInterval is how often a standby tries the lock. Default 2s.
	PollInterval time.Duration
	// CheckInterval is how often a leader checks its session. Default 1s.
	CheckInterval time.Duration
	// KeepaliveIdle, KeepaliveInterval and KeepaliveCount are the server's
	// TCP keepalive settings for the lock session. Defaults 5s, 2s, 3: a
	// vanished leader's lock is freed within about 11s.
	KeepaliveIdle, KeepaliveInterval time.Duration
	KeepaliveCount                   int
	// Logger gets standby and leadership lines; the caller's logger names
	// the pipeline.
	Logger *slog.Logger
	// Admit, when set, is asked before each try of a lock nobody holds:
	// a process that leads as many pipelines as it may (its cap, its fair
	// share) stands by without trying. unled counts the polls in a row
	// that found the pipeline without a leader, so that a process over
	// its share can still take a pipeline nobody else takes. ok reserves
	// a place; release gives it back, and Acquire calls it itself when
	// the try fails.
	Admit func(unled int) (release func(), ok bool)
}

func (c *Config) defaults() {
	if c.Holder == "" {
		host, _ := os.Hostname()
		c.Holder = "walcast " + host + " pid " + strconv.Itoa(os.Getpid())
	}
	if len(c.Holder) > 63 {
		c.Holder = c.Holder[:63]
	}
	if c.PollInterval <= 0 {
		c.PollInterval = 2 * time.Second
	}
	if c.CheckInterval <= 0 {
		c.CheckInterval = time.Second
	}
	if c.KeepaliveIdle <= 0 {
		c.KeepaliveIdle = 5 * time.Second
	}
	if c.KeepaliveInterval <= 0 {
		c.KeepaliveInterval = 2 * time.Second
	}
	if c.KeepaliveCount <= 0 {
		c.KeepaliveCount = 3
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Keys returns the two int4 keys of the pipeline's advisory lock: a fixed
// class for walcast and a hash of the pipeline name. Anyone can find the
// holder in pg_locks (locktype 'advisory', classid and objid these keys).
func Keys(pipeline string) (class, obj int32) {
	h := fnv.New32a()
	h.Write([]byte(pipeline))
	return 0x77636173, int32(h.Sum32()) // "wcas"
}

// Holder describes the current leader of a pipeline.
type Holder struct {
	PID   int       // the lock session's backend pid
	Name  string    // its application_name (Config.Holder)
	Since time.Time // when the session started
}

// Lease is held leadership. Its methods are safe for concurrent use.
type Lease struct {
	cfg  Config
	mu   sync.Mutex // serialises use of conn
	conn *pgx.Conn
	lost chan struct{}
	once sync.Once
	err  error // why it was lost
	done chan struct{}
	stop context.CancelFunc
	// alive is when the session last proved alive, by a ping or a
	// statement that succeeded (monotonic, since base).
	base  time.Time
	alive atomic.Int64
	// predecessor: another process led while this one stood by.
	predecessor bool
	// released: the previous term ended with Release (walcast.leaderships).
	released bool
}

// ErrLost is wrapped by what a lease's methods return once its session is
// gone: another process may lead by now.
var ErrLost = errors.New("leadership lost")

// Acquire blocks until this process holds the pipeline's lock, or ctx ends.
// While it waits it logs once whom it stands by for, and again only when
// the leader changes. An error that retrying cannot fix (pg.Permanent:
// a missing privilege, a wrong password) ends it with that error.
func Acquire(ctx context.Context, cfg Config) (*Lease, error) {
	cfg.defaults()
	s := &standby{cfg: cfg}
	for {
		l, err := s.try(ctx)
		switch {
		case err != nil:
			if err := s.failed(ctx, err); err != nil {
				return nil, err
			}
		case l != nil:
			return l, nil
		}
		if !sleep(ctx, cfg.PollInterval) {
			return nil, ctx.Err()
		}
	}
}

// standby is what Acquire remembers from one try of the lock to the next.
type standby struct {
	cfg Config
	// leader is the holder this process last stood by for; zero when it
	// saw no other leader, and then a lease it takes has no predecessor.
	leader Holder
	// warned: the source was said to be unreachable; full: this process
	// was said to lead as many pipelines as it may. Each is said once.
	warned, full bool
	// unled counts the tries in a row that found the pipeline without a
	// leader (Config.Admit).
	unled int
}

// try makes one attempt at the lock: the lease when it took it; nil when
// another process leads, or this one may not lead one more pipeline; or
// the error that ended the attempt. The session is closed unless it
// holds the lock.
func (s *standby) try(ctx context.Context) (*Lease, error) {
	conn, err := connect(ctx, s.cfg)
	if err != nil {
		return nil, err
	}
	release, ok, err := s.admit(ctx, conn)
	if err != nil || !ok {
		conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	got, released, err := s.lock(ctx, conn)
	if err != nil || !got {
		release()
	}
	if err != nil {
		return nil, err
	}
	s.warned = false
	if !got {
		h, err := current(ctx, conn, s.cfg.Pipeline)
		conn.Close(context.WithoutCancel(ctx))
		if err == nil {
			s.follow(h)
		}
		return nil, nil
	}
	l := start(s.cfg, conn)
	l.predecessor = s.leader != (Holder{})
	l.released = released
	return l, nil
}

// admit asks Config.Admit for a place, only when nobody leads: a standby
// of a led pipeline is not at capacity, it waits for the leader. ok is
// false when this process stands by without trying the lock; release
// gives the place back when the try fails.
func (s *standby) admit(ctx context.Context, conn *pgx.Conn) (release func(), ok bool, err error) {
	if s.cfg.Admit == nil {
		return func() {}, true, nil
	}
	h, held, err := Current(ctx, conn, s.cfg.Pipeline)
	if err != nil {
		return nil, false, err
	}
	if held {
		s.unled = 0
		s.follow(h)
		s.full = false
		return nil, false, nil
	}
	s.unled++
	if release, ok = s.cfg.Admit(s.unled); !ok {
		if !s.full {
			s.cfg.Logger.Info("standing by: this walcast leads as many pipelines as it may (--max-pipelines, or its fair share of the instances running the same pipelines)")
			s.full = true
		}
		return nil, false, nil
	}
	s.full = false
	return release, true, nil
}

// lock tries the pipeline's lock on conn and, when it got it, claims the
// term. On an error conn is closed, which gives the lock back.
func (s *standby) lock(ctx context.Context, conn *pgx.Conn) (got, released bool, err error) {
	class, obj := Keys(s.cfg.Pipeline)
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, $2)`, class, obj).Scan(&got); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return false, false, fmt.Errorf("try the leadership lock of pipeline %s: %w", s.cfg.Pipeline, err)
	}
	if !got {
		return false, false, nil
	}
	if released, err = claim(ctx, conn, s.cfg); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return false, false, err
	}
	return true, released, nil
}

// failed says whether the error of a try ends Acquire: ctx ended, or
// retrying cannot fix it. Anything else is said once and tried again.
func (s *standby) failed(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	// A missing privilege, a wrong password: standing by would wait
	// forever for what only an operator can fix.
	if pg.Permanent(err) {
		return err
	}
	// PostgreSQL restarting, the network: keep standing by, and say so
	// once.
	if !s.warned {
		s.cfg.Logger.Warn("cannot reach the source database to take the pipeline's leadership; retrying", "err", err)
		s.warned = true
	}
	return nil
}

// claim records, on the lock session just taken, that this process leads,
// and returns whether the previous term was released on purpose. The mark
// is cleared before anything streams, so that it never outlives the term
// that wrote it: a successor of this term sees it only if this term's
// Release sets it again. Before the walcast schema exists there is no
// mark (no leader wrote one): false, nil.
func claim(ctx context.Context, conn *pgx.Conn, cfg Config) (released bool, err error) {
	err = conn.QueryRow(ctx, `
WITH prev AS (SELECT released_at FROM walcast.leaderships WHERE pipeline = $1)
INSERT INTO walcast.leaderships AS l (pipeline, holder, taken_at) VALUES ($1, $2, now())
ON CONFLICT (pipeline) DO UPDATE SET holder = EXCLUDED.holder, taken_at = EXCLUDED.taken_at, released_at = NULL
RETURNING coalesce((SELECT released_at IS NOT NULL FROM prev), false)`, cfg.Pipeline, cfg.Holder).Scan(&released)
	if control.NoSchema(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("record the leadership of pipeline %s: %w", cfg.Pipeline, err)
	}
	return released, nil
}

// follow logs whom this process stands by for, once per leader.
func (s *standby) follow(h Holder) {
	if h != s.leader {
		s.cfg.Logger.Info("standing by: another walcast streams this pipeline; taking over when it stops",
			"leader", h.Name, "leader_pid", h.PID, "since", h.Since.UTC().Format(time.RFC3339))
	}
	s.leader = h
}

// sleep waits d; false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// connect opens the lock session with server-side TCP keepalives, so that
// PostgreSQL itself frees the lock of a leader whose machine vanished.
func connect(ctx context.Context, cfg Config) (*pgx.Conn, error) {
	pcfg, err := pgx.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("parse source dsn: %w", err)
	}
	if pcfg.ConnectTimeout == 0 {
		pcfg.ConnectTimeout = 10 * time.Second
	}
	pcfg.RuntimeParams["application_name"] = cfg.Holder
	pcfg.RuntimeParams["tcp_keepalives_idle"] = strconv.Itoa(int(cfg.KeepaliveIdle.Seconds()))
	pcfg.RuntimeParams["tcp_keepalives_interval"] = strconv.Itoa(int(cfg.KeepaliveInterval.Seconds()))
	pcfg.RuntimeParams["tcp_keepalives_count"] = strconv.Itoa(cfg.KeepaliveCount)
	conn, err := pgx.ConnectConfig(ctx, pcfg)
	if err != nil {
		return nil, pg.ConnectFailed("open the leadership session of pipeline "+cfg.Pipeline+": connect to", &pcfg.Config, err)
	}
	return conn, nil
}

// Current returns who holds the pipeline's lock; ok is false when nobody
// does. db is any connection to the source database.
func Current(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, pipeline string) (h Holder, ok bool, err error) {
	h, err = current(ctx, db, pipeline)
	if errors.Is(err, pgx.ErrNoRows) {
		return Holder{}, false, nil
	}
	return h, err == nil, err
}

func current(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, pipeline string) (Holder, error) {
	class, obj := Keys(pipeline)
	var h Holder
	err := db.QueryRow(ctx, `
SELECT a.pid, a.application_name, a.backend_start
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1::int::oid AND l.objid = $2::int::oid AND l.objsubid = 2
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
		class, obj).Scan(&h.PID, &h.Name, &h.Since)
	return h, err
}

func start(cfg Config, conn *pgx.Conn) *Lease {
	ctx, stop := context.WithCancel(context.Background())
	l := &Lease{cfg: cfg, conn: conn, lost: make(chan struct{}), done: make(chan struct{}), stop: stop, base: time.Now()}
	go l.watch(ctx)
	cfg.Logger.Info("leading: this walcast streams the pipeline", "holder", cfg.Holder)
	return l
}

// watch pings the session every CheckInterval and declares the lease lost
// when a ping fails or takes longer than the interval allows.
func (l *Lease) watch(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(l.cfg.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// The ping's time starts once the session is free: a long write
		// on it (Exec) is the session at work, not the session failing.
		l.mu.Lock()
		pctx, cancel := context.WithTimeout(ctx, 2*l.cfg.CheckInterval)
		err := l.conn.Ping(pctx)
		l.mu.Unlock()
		cancel()
		if err != nil && ctx.Err() == nil {
			l.markLost(fmt.Errorf("the leadership session of pipeline %s failed: %w", l.cfg.Pipeline, err))
			return
		}
		if err == nil {
			l.alive.Store(int64(time.Since(l.base)))
		}
	}
}

// freshFor is how recent the last successful ping must be for Fresh: the
// check interval, plus the ping's own timeout, plus one interval of slack.
func (l *Lease) freshFor() time.Duration { return 3 * l.cfg.CheckInterval }

// WaitOutPredecessor returns once a leader this process stood by for can
// no longer deliver: a predecessor that was frozen with its lease fresh
// stops delivering at most its freshness window after its session
// ended, so a successor that saw one waits out that window (counted from
// its own acquisition, which came after that session ended) before
// delivering. A predecessor that released the lock had ended its term
// first, and a process that saw no other leader: both start at once.
func (l *Lease) WaitOutPredecessor(ctx context.Context) error {
	if !l.predecessor || l.released {
		return nil
	}
	wait := l.freshFor() - time.Since(l.base)
	if wait <= 0 {
		return nil
	}
	l.cfg.Logger.Info("the previous leader stopped without releasing the pipeline (killed, frozen or cut off): waiting out its lease before streaming",
		"wait", wait.Round(time.Millisecond))
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
		return nil
	}
}

// Fresh reports whether the session was seen alive recently. A process
// that was frozen (SIGSTOP, a long GC pause, a suspended VM) wakes up with
// a stale lease: it must not deliver or confirm anything until its next
// ping says whether it still leads.
func (l *Lease) Fresh() bool {
	if l.Err() != nil {
		return false
	}
	return time.Since(l.base)-time.Duration(l.alive.Load()) <= l.freshFor()
}

// WaitFresh waits until the lease is fresh, or returns ErrLost once it is
// lost, or ctx's error. Deliveries pass through it: on a healthy leader it
// returns at once.
func (l *Lease) WaitFresh(ctx context.Context) error {
	for {
		if l.Fresh() {
			return nil
		}
		if err := l.Err(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.lost:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (l *Lease) markLost(err error) {
	l.once.Do(func() {
		l.err = err
		close(l.lost)
		l.cfg.Logger.Warn("leadership lost: stopping deliveries at once; a standby may take over", "err", err)
	})
}

// PID is the backend pid of the lock session: whoever must check, inside
// a transaction of its own, that the lock is still held looks for it in
// pg_locks.
func (l *Lease) PID() uint32 { return l.conn.PgConn().PID() }

// Lost is closed once the lock session is gone.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err says why the lease was lost, nil while it is held.
func (l *Lease) Err() error {
	select {
	case <-l.lost:
		return fmt.Errorf("%w: %w", ErrLost, l.err)
	default:
		return nil
	}
}

// Exec runs a statement on the lock session: it cannot succeed once the
// session that holds the lock is gone. Every control-plane write of a term
// goes through it (checkpoints, parked events, catch-up slots, usage).
// Its success proves the session alive, as a ping does.
//
// The caller's cancellation does not reach the statement once it is sent:
// pgx closes a connection whose query is cancelled, and closing this one
// would give up the leadership (a graceful stop cancels its writers while
// one of them may be writing). The statement is bounded instead, by the
// session's own check interval plus time for its arguments to travel (a
// batch of parked events can be tens of MiB); one that takes longer
// closes the session, which loses the lease.
func (l *Lease) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := l.Err(); err != nil {
		return pgconn.CommandTag{}, err
	}
	if err := ctx.Err(); err != nil {
		return pgconn.CommandTag{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.writeBound(args))
	defer cancel()
	sent := time.Since(l.base)
	tag, err := l.conn.Exec(ectx, sql, args...)
	switch {
	case err == nil:
		l.alive.Store(int64(sent))
	case l.conn.IsClosed():
		l.markLost(err)
	}
	return tag, err
}

// writeBound is how long a statement with args may take on the lock
// session: two check intervals, plus a second per 4 MiB of arguments.
func (l *Lease) writeBound(args []any) time.Duration {
	n := 0
	for _, a := range args {
		switch v := a.(type) {
		case string:
			n += len(v)
		case []byte:
			n += len(v)
		case []string:
			for _, s := range v {
				n += len(s)
			}
		case [][]byte:
			for _, b := range v {
				n += len(b)
			}
		}
	}
	return 2*l.cfg.CheckInterval + time.Duration(n)*time.Second/(4<<20)
}

// Begin starts a transaction on the lock session, for control-plane
// writes that must commit together (a gap accepted with the old
// checkpoints removed, a schema migration): like Exec's statements it
// cannot commit once the session is gone. The session does nothing else
// until Commit or Rollback (the lease's pings wait), so the transaction
// must be short and must not use the lease itself. Unlike Exec, the
// caller's ctx reaches the statements: cancelling one closes the session
// and so gives the leadership up, which only a stopping term does.
func (l *Lease) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := l.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	tx, err := l.conn.Begin(ctx)
	if err != nil {
		if l.conn.IsClosed() {
			l.markLost(err)
		}
		l.mu.Unlock()
		return nil, err
	}
	return &leaseTx{Tx: tx, l: l}, nil
}

// leaseTx is a transaction on the lock session; it frees the session when
// it ends.
type leaseTx struct {
	pgx.Tx
	l    *Lease
	once sync.Once
}

func (t *leaseTx) Commit(ctx context.Context) error {
	err := t.Tx.Commit(ctx)
	t.end(err)
	return err
}

func (t *leaseTx) Rollback(ctx context.Context) error {
	err := t.Tx.Rollback(ctx)
	t.end(err)
	return err
}

func (t *leaseTx) end(err error) {
	t.once.Do(func() {
		if err != nil && t.l.conn.IsClosed() {
			t.l.markLost(err)
		}
		t.l.mu.Unlock()
	})
}

// Release gives the lock up by closing its session; a standby takes over
// within its poll interval. It waits for the watcher to end. Call it only
// once nothing is delivered or confirmed under the lease any more: it
// marks the term released (walcast.leaderships) on the lock session before
// closing it, and the successor then streams without waiting out this
// lease. A lease already lost cannot write the mark.
func (l *Lease) Release(ctx context.Context) error {
	l.stop()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Err() == nil {
		// An upsert: the term may have taken the lock before the walcast
		// schema existed.
		mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := l.conn.Exec(mctx, `
INSERT INTO walcast.leaderships (pipeline, holder, taken_at, released_at) VALUES ($1, $2, now(), now())
ON CONFLICT (pipeline) DO UPDATE SET released_at = now()`, l.cfg.Pipeline, l.cfg.Holder)
		cancel()
		if err != nil && !control.NoSchema(err) {
			// The successor waits out this lease instead: slower, not wrong.
			l.cfg.Logger.Warn("cannot mark the leadership released; a standby waits a few seconds longer to take over", "err", err)
		}
	}
	return l.conn.Close(ctx)
}
