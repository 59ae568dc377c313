package backfill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walcast/walcast/host/internal/pg"
	"github.com/walcast/walcast/host/internal/source/decode"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Config configures a Runner.
type Config struct {
	// DSN of the source database.
	DSN      string
	Pipeline string
	// Publication is the pipeline's publication: a backfill reads only
	// the columns it publishes and the rows its row filter keeps
	// (Table.Restrict).
	Publication string
	// KeylessPublication is the publication the slot streams with
	// Publication, if any: its row filters count too.
	KeylessPublication string
	// Tables are the pipeline's captured tables ("schema.table") and
	// Sinks its sink ids: a backfill of anything else fails.
	Tables []string
	Sinks  []string
	// ChunkRows and ChunkBytes bound one chunk (defaults 1000 rows and
	// 4 MiB). The byte bound is kept by sizing each chunk from the rows
	// of the one before, so a chunk may exceed it by a row's worth.
	ChunkRows  int
	ChunkBytes int
	// RowsPerSecond, when > 0, limits the read rate.
	RowsPerSecond float64
	// Window is how many chunks may be written and not yet acknowledged
	// (below Flushed) at any moment, counting every backfill of the
	// pipeline and the chunks a previous run wrote (default 16): the
	// backfills of a pipeline never run far ahead of its sinks.
	Window int
	// Flushed is the stream's position acknowledged by every durable sink
	// (the position the slot may be confirmed to).
	Flushed func() uint64
	// Poll is how often the queue is read without a Wake (default 5s).
	Poll   time.Duration
	Logger *slog.Logger
	// ChunkRead, when set, is called after a chunk's rows were read and
	// before its transaction commits (tests).
	ChunkRead func(backfill, chunk int64)
	// Leader, when set, is the session that holds the pipeline's
	// leadership lock: each chunk's transaction checks that it still
	// does, so that a leader that lost its leadership writes no more
	// chunks and progress (Run then returns).
	Leader *Lock
}

// Lock names a session-level advisory lock and the backend that should
// hold it.
type Lock struct {
	PID        uint32
	Class, Obj int32
}

// ErrNotLeading is returned by a chunk whose Config.Leader no longer holds
// its lock.
var ErrNotLeading = errors.New("this walcast no longer leads the pipeline")

// Runner works through a pipeline's backfills, one at a time, oldest
// first.
type Runner struct {
	cfg  Config
	log  *slog.Logger
	wake chan struct{}

	// The window, over every backfill the runner works through (only
	// Run's goroutine uses these). ahead holds the WAL positions just
	// past each chunk written and not yet acknowledged; before is the
	// WAL position when Run last connected: chunks written earlier (by a
	// previous run, or one whose commit the lost connection left
	// unconfirmed) are not in ahead, so nothing more is written until
	// the stream is acknowledged past it.
	ahead  []uint64
	before uint64

	mu    sync.Mutex
	stats map[int64]*Stats
}

// Stats are a backfill's figures in this process.
type Stats struct {
	Rows, Chunks       int64
	LockTotal, LockMax time.Duration
	Started            time.Time
}

// NewRunner returns a runner; call Run.
func NewRunner(cfg Config) *Runner {
	if cfg.ChunkRows <= 0 {
		cfg.ChunkRows = 1000
	}
	if cfg.ChunkBytes <= 0 {
		cfg.ChunkBytes = 4 << 20
	}
	if cfg.Window <= 0 {
		cfg.Window = 16
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Runner{cfg: cfg, log: cfg.Logger, wake: make(chan struct{}, 1), stats: map[int64]*Stats{}}
}

// Wake makes Run look at the queue now (a request was made).
func (r *Runner) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// StatsOf returns the figures of backfill id in this process.
func (r *Runner) StatsOf(id int64) (Stats, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.stats[id]
	if !ok {
		return Stats{}, false
	}
	return *s, true
}

// Connect opens a connection whose text output matches what pgoutput
// sends on capture's replication connection, so that read events and live
// events of the same row carry the same values.
func Connect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse source dsn: %w", err)
	}
	cfg.RuntimeParams["TimeZone"] = "UTC"
	cfg.RuntimeParams["DateStyle"] = "ISO, MDY"
	cfg.RuntimeParams["IntervalStyle"] = "postgres"
	cfg.RuntimeParams["extra_float_digits"] = "3"
	cfg.RuntimeParams["bytea_output"] = "hex"
	// A chunk that waits long for a writer's row lock holds up other
	// writers on the rows it already locked: give up and retry instead.
	cfg.RuntimeParams["lock_timeout"] = "2s"
	cfg.RuntimeParams["application_name"] = "walcast-backfill"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect for backfill: %w", err)
	}
	return conn, nil
}

// Run works through the queue until ctx ends. Errors talking to the
// database are logged and retried; a backfill that cannot go on (its table
// was dropped, the role may not read it: pg.Permanent) is marked failed
// with the reason. An error retrying cannot fix that is not one
// backfill's (the role may not log in, or use walcast.backfills) ends Run
// with that error.
func (r *Runner) Run(ctx context.Context) error {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		if conn == nil || conn.IsClosed() {
			c, err := Connect(ctx, r.cfg.DSN)
			if err == nil {
				err = r.markStart(ctx, c)
			}
			if err != nil {
				if c != nil {
					c.Close(context.Background())
				}
				if pg.Permanent(err) && ctx.Err() == nil {
					return err
				}
				if ctx.Err() == nil {
					r.log.Warn("backfill: connect", "err", err, "retry_in", backoff)
				}
				r.sleep(ctx, backoff, false)
				backoff = min(2*backoff, 10*time.Second)
				continue
			}
			conn = c
		}
		worked, err := r.next(ctx, conn)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrNotLeading):
			// For good: a lease never comes back, a new term runs a new
			// runner.
			r.log.Info("backfill stops: this walcast no longer leads the pipeline; whoever leads next goes on from the last chunk written")
			return nil
		case pg.Permanent(err):
			return fmt.Errorf("backfills stopped: %w", err)
		case err != nil:
			r.log.Warn("backfill interrupted; retrying", "err", err, "retry_in", backoff)
			if conn != nil {
				conn.Close(context.Background())
				conn = nil
			}
			r.sleep(ctx, backoff, false)
			backoff = min(2*backoff, 10*time.Second)
		case worked:
			backoff = 100 * time.Millisecond
		default:
			backoff = 100 * time.Millisecond
			r.sleep(ctx, r.cfg.Poll, true)
		}
	}
	return nil
}

// markStart records where the WAL is as Run (re)connects: every chunk
// committed before is behind that position (see Runner.before). A chunk
// whose batch a previous run sent just before it died may still be
// committing on its own: its transaction holds its backfill's row, so the
// rows of the active backfills are taken first, which waits for it.
func (r *Runner) markStart(ctx context.Context, conn *pgx.Conn) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("backfill: read the WAL position: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT id FROM walcast.backfills WHERE pipeline = $1 AND state IN ('queued', 'running') FOR UPDATE`, r.cfg.Pipeline); err != nil {
		return fmt.Errorf("backfill: wait for chunks of an earlier run: %w", err)
	}
	var pos string
	if err := tx.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&pos); err != nil {
		return fmt.Errorf("backfill: read the WAL position: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("backfill: read the WAL position: %w", err)
	}
	lsn, err := cdc.ParseLSN(pos)
	if err != nil {
		return fmt.Errorf("backfill: read the WAL position: %w", err)
	}
	r.before = max(r.before, lsn)
	return nil
}

func (r *Runner) sleep(ctx context.Context, d time.Duration, wakeable bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	var wake chan struct{}
	if wakeable {
		wake = r.wake
	}
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-wake:
	}
}

// next runs the oldest active backfill to its end and reports whether
// there was one. A backfill that meets an error retrying cannot fix is
// marked failed with it, explained (the role, the table, the GRANT).
func (r *Runner) next(ctx context.Context, conn *pgx.Conn) (bool, error) {
	id, err := r.nextOne(ctx, conn)
	if id == 0 || err == nil || !pg.Permanent(err) || ctx.Err() != nil {
		return id != 0, err
	}
	return true, r.fail(ctx, conn, id, pg.Explain(err, pg.Role(r.cfg.DSN)).Error())
}

// nextOne runs the oldest active backfill to its end and returns its id
// (0: there was none).
func (r *Runner) nextOne(ctx context.Context, conn *pgx.Conn) (int64, error) {
	var id int64
	var schema, table, state string
	var sinks []string
	var resync bool
	var partition *int64
	err := conn.QueryRow(ctx, `SELECT id, schema_name, table_name, state, sinks, resync, partition_oid FROM walcast.backfills
WHERE pipeline = $1 AND state IN ('queued', 'running') ORDER BY id LIMIT 1`, r.cfg.Pipeline).Scan(&id, &schema, &table, &state, &sinks, &resync, &partition)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read backfill queue: %w", err)
	}
	name := schema + "." + table
	if reason := r.refuse(name, sinks); reason != "" {
		return id, r.fail(ctx, conn, id, reason)
	}
	t, err := Inspect(ctx, conn, name)
	if err == nil {
		err = t.Restrict(ctx, conn, r.cfg.Publication, r.cfg.KeylessPublication)
	}
	if partition != nil {
		t.Partition = uint32(*partition)
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) || conn.IsClosed() {
			return id, err
		}
		return id, r.fail(ctx, conn, id, err.Error())
	}
	var end []byte
	if resync {
		if end, err = r.marker(id, t, sinks, decode.ResyncEnd); err != nil {
			return id, err
		}
	}
	if state == StateQueued {
		if err := r.start(ctx, conn, id, t, sinks, resync); err != nil {
			return id, err
		}
	}
	return id, r.run(ctx, conn, id, t, sinks, end)
}

// refuse says why a queued backfill cannot run in this pipeline, if so.
func (r *Runner) refuse(table string, sinks []string) string {
	if r.cfg.Tables != nil && !slices.Contains(r.cfg.Tables, table) {
		return fmt.Sprintf("table %s is not in the pipeline's source tables", table)
	}
	for _, s := range sinks {
		if r.cfg.Sinks != nil && !slices.Contains(r.cfg.Sinks, s) {
			return fmt.Sprintf("the pipeline has no sink %q", s)
		}
	}
	return ""
}

func (r *Runner) fail(ctx context.Context, conn *pgx.Conn, id int64, reason string) error {
	r.log.Warn("backfill failed", "backfill", id, "reason", reason)
	_, err := conn.Exec(ctx, `UPDATE walcast.backfills SET state = 'failed', reason = $2, updated_at = now(), finished_at = now()
WHERE id = $1 AND state IN ('queued', 'running')`, id, reason)
	if err != nil {
		return fmt.Errorf("mark backfill %d failed: %w", id, err)
	}
	return nil
}

// start marks a queued backfill running with the table's size estimate:
// counted when the table is small, the planner's estimate otherwise. A
// resync's begin marker is written into the WAL by the same statement, so
// it is there exactly when the resync runs, before its first chunk.
func (r *Runner) start(ctx context.Context, conn *pgx.Conn, id int64, t Table, sinks []string, resync bool) error {
	var est int64
	var pages int64
	err := conn.QueryRow(ctx, `SELECT greatest(reltuples, 0)::bigint, relpages::bigint FROM pg_class WHERE oid = $1::regclass`,
		pgx.Identifier{t.Schema, t.Name}.Sanitize()).Scan(&est, &pages)
	if err != nil {
		return fmt.Errorf("estimate rows of %s: %w", t, err)
	}
	if pages < 2000 || est == 0 {
		filter, err := t.readRowFilter(ctx, conn)
		if err != nil {
			return err
		}
		where := ""
		if filter != "" {
			where = " WHERE " + filter
		}
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{t.Schema, t.Name}.Sanitize()+where).Scan(&est); err != nil {
			return fmt.Errorf("count rows of %s: %w", t, err)
		}
	}
	var begin []byte
	if resync {
		if begin, err = r.marker(id, t, sinks, decode.ResyncBegin); err != nil {
			return err
		}
	}
	_, err = conn.Exec(ctx, `WITH started AS (
	UPDATE walcast.backfills SET state = 'running', estimate = $2, started_at = now(), updated_at = now()
	WHERE id = $1 AND state = 'queued' RETURNING id)
SELECT pg_logical_emit_message(true, $3, $4::bytea) FROM started WHERE $4::bytea IS NOT NULL`, id, est, decode.ResyncPrefix, begin)
	if err != nil {
		return fmt.Errorf("start backfill %d: %w", id, err)
	}
	if resync {
		r.log.Info("resync started", "resync", id, "table", t.String(), "sinks", sinks, "estimate", est)
		return nil
	}
	r.log.Info("backfill started", "backfill", id, "table", t.String(), "estimate", est)
	return nil
}

// marker encodes a resync's begin or end marker message.
func (r *Runner) marker(id int64, t Table, sinks []string, phase string) ([]byte, error) {
	b, err := json.Marshal(decode.ResyncMarker{Pipeline: r.cfg.Pipeline, Resync: id, Phase: phase, Sinks: sinks, Schema: t.Schema, Table: t.Name})
	if err != nil {
		return nil, fmt.Errorf("resync %d: encode the %s marker: %w", id, phase, err)
	}
	return b, nil
}

// run reads chunk after chunk until the backfill is done or cancelled.
// end, for a resync, is its end marker, which the last chunk writes after
// its rows.
func (r *Runner) run(ctx context.Context, conn *pgx.Conn, id int64, t Table, sinks []string, end []byte) error {
	st := &Stats{Started: time.Now()}
	r.mu.Lock()
	r.stats[id] = st
	r.mu.Unlock()
	limit := min(r.cfg.ChunkRows, 100) // sized up once row widths are known
	for {
		if err := r.waitWindow(ctx); err != nil {
			return err
		}
		if r.cfg.RowsPerSecond > 0 {
			due := st.Started.Add(time.Duration(float64(st.Rows) / r.cfg.RowsPerSecond * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				r.sleep(ctx, d, false)
			}
		}
		res, err := r.chunk(ctx, conn, id, t, sinks, limit, end)
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
				// lock_timeout: a writer holds a row for long; let it
				// finish and try the chunk again.
				r.log.Debug("backfill chunk waited too long for a row lock; retrying", "backfill", id)
				continue
			}
			if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "42703") {
				return r.fail(ctx, conn, id, fmt.Sprintf("table %s changed under the backfill: %v", t, pgErr.Message))
			}
			return err
		}
		r.mu.Lock()
		st.Rows += int64(res.rows)
		if res.rows > 0 {
			st.Chunks++
		}
		st.LockTotal += res.locked
		st.LockMax = max(st.LockMax, res.locked)
		r.mu.Unlock()
		if res.rows > 0 {
			// The last chunk of a backfill counts too: the next
			// backfill's chunks follow it in the same window.
			r.ahead = append(r.ahead, res.pos)
		}
		if res.state != StateRunning {
			if res.state == StateDone {
				secs := time.Since(st.Started).Seconds()
				var avg time.Duration
				if st.Chunks > 0 {
					avg = st.LockTotal / time.Duration(st.Chunks)
				}
				r.log.Info("backfill done", "backfill", id, "table", t.String(), "rows", st.Rows, "chunks", st.Chunks,
					"rows_per_s", int64(float64(st.Rows)/max(secs, 1e-3)), "lock_avg", avg, "lock_max", st.LockMax)
			}
			return nil
		}
		if res.rows > 0 && res.bytes > 0 {
			limit = max(1, min(r.cfg.ChunkRows, int(int64(r.cfg.ChunkBytes)*int64(res.rows)/int64(res.bytes))))
		}
	}
}

// waitWindow blocks while Window chunks are written but not acknowledged,
// or chunks of an earlier run may be.
func (r *Runner) waitWindow(ctx context.Context) error {
	if r.cfg.Flushed == nil {
		return nil
	}
	since := time.Now()
	told := false
	for {
		flushed := r.cfg.Flushed()
		n := 0
		for n < len(r.ahead) && r.ahead[n] <= flushed {
			n++
		}
		r.ahead = r.ahead[n:]
		if len(r.ahead) < r.cfg.Window && flushed >= r.before {
			if told {
				r.log.Info("backfill goes on: the sinks caught up", "waited", time.Since(since).Round(time.Second))
			}
			return nil
		}
		if !told && time.Since(since) > 30*time.Second {
			// Not stuck: the sinks are behind the chunks written (a sink
			// slower than the live changes never catches up).
			told = true
			oldest := r.before
			if len(r.ahead) > 0 && flushed >= r.before {
				oldest = r.ahead[0]
			}
			r.log.Info("backfill waits for the sinks to acknowledge the chunks written", "chunks_ahead", len(r.ahead),
				"acknowledged", cdc.FormatLSN(flushed), "waiting_for", cdc.FormatLSN(oldest))
		}
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// progress is what a chunk's first round trip reads.
type progress struct {
	state  string
	last   []string
	chunks int64
	pubs   []pubFilter
}

// begin opens a chunk's transaction and, in the same round trip, locks and
// reads the backfill's progress, reads the row filters as they are now
// (pgoutput applies to a change the filters in force where it is in the
// WAL, so a filter changed during a backfill applies from the next chunk
// on) and, with Config.Leader, checks that the leader still holds its lock.
// A leader that lost it (its session cut or ended) writes nothing more
// (ErrNotLeading). It may lose it between this check and the commit: the
// chunk then still commits once, before any successor's chunk (which waits
// for the progress row), and the successor's stream carries it.
func (r *Runner) begin(ctx context.Context, conn *pgx.Conn, id int64, t Table) (progress, error) {
	var pr progress
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
	b.Queue(`SELECT state, last_key, chunks_done FROM walcast.backfills WHERE id = $1 FOR UPDATE`, id).QueryRow(func(row pgx.Row) error {
		return row.Scan(&pr.state, &pr.last, &pr.chunks)
	})
	if len(t.publications) > 0 {
		b.Queue(rowFilterSQL, t.publications, t.Schema, t.Name).Query(func(rows pgx.Rows) error {
			var err error
			pr.pubs, err = pgx.CollectRows(rows, pgx.RowToStructByPos[pubFilter])
			return err
		})
	}
	leading := true
	if l := r.cfg.Leader; l != nil {
		b.Queue(`SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = $1
	AND classid = $2::int::oid AND objid = $3::int::oid AND objsubid = 2)`, int32(l.PID), l.Class, l.Obj).QueryRow(func(row pgx.Row) error {
			return row.Scan(&leading)
		})
	}
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return pr, fmt.Errorf("backfill %d: read progress and row filters: %w", id, err)
	}
	if !leading {
		return pr, ErrNotLeading
	}
	return pr, nil
}

type chunkResult struct {
	state  string
	rows   int
	bytes  int
	pos    uint64 // WAL insert position just after the chunk's commit
	locked time.Duration
}

// chunk runs one chunk's transaction (see the package documentation):
// begin with the progress, find the bound, read and lock the rows, then
// write the message, the progress and COMMIT together.
func (r *Runner) chunk(ctx context.Context, conn *pgx.Conn, id int64, t Table, sinks []string, limit int, end []byte) (chunkResult, error) {
	var res chunkResult
	// The transaction is driven by hand rather than with pgx.Tx, so that
	// BEGIN travels with the progress read and the message, progress and
	// COMMIT with each other: three round trips fewer per chunk
	// (docs/benchmarks.md, "Backfill path").
	open := true
	defer func() {
		if open {
			conn.Exec(context.Background(), "ROLLBACK")
		}
	}()
	pr, err := r.begin(ctx, conn, id, t)
	if err != nil {
		return res, err
	}
	res.state = pr.state
	if res.state != StateRunning {
		_, err := conn.Exec(ctx, "COMMIT")
		open = err != nil
		return res, err
	}
	// The chunk's upper bound: the limit-th key after the last one. Read
	// before locking, so that rows whose key an UPDATE moves while the
	// chunk waits for its lock cannot stretch the chunk past it. The bound
	// counts every row, published or not: the publications' row filter
	// applies to the locking read only, so a chunk's work stays bounded
	// by its limit whatever the filter keeps, and a chunk whose rows the
	// filter all leaves out still advances to its bound (only a chunk
	// without a bound is the last).
	bound, err := t.boundary(ctx, conn, pr.last, limit)
	if err != nil {
		return res, fmt.Errorf("backfill %d of %s: find chunk bound: %w", id, t, err)
	}
	lockStart := time.Now()
	read, err := r.readChunk(ctx, conn, id, t, sinks, pr, bound)
	if err != nil {
		return res, err
	}
	res.rows, res.bytes = read.rows, read.bytes
	next := bound
	state := StateRunning
	if bound == nil {
		// Nothing is left after this chunk: rows inserted from now on
		// reach the sinks as inserts.
		state = StateDone
		if read.lastKey != nil {
			next = read.lastKey
		} else {
			next = pr.last
		}
	}
	if r.cfg.ChunkRead != nil {
		r.cfg.ChunkRead(id, pr.chunks+1)
	}
	if state != StateDone {
		end = nil
	}
	if res.pos, err = r.commitChunk(ctx, conn, id, t, read, next, state, end); err != nil {
		return res, err
	}
	open = false
	res.locked = time.Since(lockStart)
	res.state = state
	return res, nil
}

// chunkRows is what a chunk's locking read made of its rows.
type chunkRows struct {
	// payload is the chunk's logical decoding message: the JSON header,
	// then the rows as length-prefixed raw values.
	payload     []byte
	rows, bytes int
	// lastKey is the page key of the last row read, kept only for a
	// chunk without a bound (the last one).
	lastKey []string
}

// readChunk reads the rows after the last key up to bound, locking them
// (FOR SHARE) and keeping those the publications' row filters keep, and
// encodes them into the chunk's message.
func (r *Runner) readChunk(ctx context.Context, conn *pgx.Conn, id int64, t Table, sinks []string, pr progress, bound []string) (chunkRows, error) {
	var c chunkRows
	sql, args := t.readQuery(pr.last, bound, t.withPartition(rowFilter(pr.pubs)))
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return c, fmt.Errorf("backfill %d of %s: read chunk: %w", id, t, err)
	}
	head, err := json.Marshal(&decode.BackfillChunk{
		Pipeline: r.cfg.Pipeline, Backfill: id, Chunk: pr.chunks + 1, Sinks: sinks,
		Schema: t.Schema, Table: t.Name, Columns: t.Columns, Key: t.EventKey,
	})
	if err != nil {
		return c, fmt.Errorf("backfill %d: encode chunk: %w", id, err)
	}
	// The rows follow the header as length-prefixed raw values
	// (decode.BackfillPrefix): no escaping here with the rows locked, and
	// no JSON to parse when the chunk comes back through the slot.
	c.payload = append(head, '\n')
	for rows.Next() {
		raw := rows.RawValues()
		for _, v := range raw {
			c.payload = decode.AppendBackfillValue(c.payload, v)
			c.bytes += len(v)
		}
		c.rows++
		if bound == nil {
			c.lastKey = c.lastKey[:0]
			for _, k := range t.PageKey {
				c.lastKey = append(c.lastKey, string(raw[k]))
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return c, fmt.Errorf("backfill %d of %s: read chunk: %w", id, t, err)
	}
	return c, nil
}

// commitChunk writes the chunk's message into the WAL (a chunk the filter
// left empty writes none) and then end (a resync's end marker, on its last
// chunk), records the progress (next is the new last key) and commits, in
// one round trip. It returns the WAL insert position read just after the
// commit.
func (r *Runner) commitChunk(ctx context.Context, conn *pgx.Conn, id int64, t Table, c chunkRows, next []string, state string, end []byte) (uint64, error) {
	b := &pgx.Batch{}
	if c.rows > 0 {
		b.Queue(`SELECT pg_logical_emit_message(true, $1, $2::bytea)`, decode.BackfillPrefix, c.payload)
	}
	if end != nil {
		b.Queue(`SELECT pg_logical_emit_message(true, $1, $2::bytea)`, decode.ResyncPrefix, end)
	}
	var pos string
	b.Queue(`UPDATE walcast.backfills SET last_key = $2, rows_done = rows_done + $3,
	chunks_done = chunks_done + $4, state = $5, updated_at = now(),
	finished_at = CASE WHEN $5 = 'running' THEN NULL ELSE now() END
WHERE id = $1`, id, next, c.rows, min(c.rows, 1), state)
	b.Queue("COMMIT")
	// Read after the commit, so the position is at or past the end of the
	// chunk's transaction: a stream acknowledged up to it has the whole
	// chunk, whatever other transactions committed meanwhile (a position
	// read before the commit could be passed by one of those first).
	b.Queue(`SELECT pg_current_wal_insert_lsn()::text`).QueryRow(func(row pgx.Row) error {
		return row.Scan(&pos)
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return 0, fmt.Errorf("backfill %d of %s: write the chunk into the WAL, record progress, commit: %w", id, t, err)
	}
	lsn, _ := cdc.ParseLSN(pos)
	return lsn, nil
}

// boundary returns the key of the limit-th row after last (in pagination
// order), or nil when fewer rows are left.
func (t Table) boundary(ctx context.Context, db Querier, last []string, limit int) ([]string, error) {
	keys := t.pageKeyList()
	cols := make([]string, len(keys))
	for i, k := range keys {
		cols[i] = k + "::text"
	}
	args := []any{limit - 1}
	var conds []string
	if last != nil {
		conds = append(conds, t.compare(">", last, &args))
	}
	if p := t.withPartition(""); p != "" {
		conds = append(conds, p)
	}
	where := ""
	if len(conds) > 0 {
		where = " WHERE " + strings.Join(conds, " AND ")
	}
	sql := fmt.Sprintf("SELECT %s FROM %s AS src%s ORDER BY %s OFFSET $1 LIMIT 1", strings.Join(cols, ", "),
		pgx.Identifier{t.Schema, t.Name}.Sanitize(), where, strings.Join(keys, ", "))
	row := make([]string, len(keys))
	dst := make([]any, len(keys))
	for i := range row {
		dst[i] = &row[i]
	}
	err := db.QueryRow(ctx, sql, args...).Scan(dst...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return row, nil
}

// readQuery is the locking read of the rows in (last, bound] that filter
// (a boolean SQL expression from rowFilter, or "") keeps. READ COMMITTED
// row locking evaluates the filter again on the newest version of a row
// it waited for, so a read never carries a row the filter no longer
// keeps.
func (t Table) readQuery(last, bound []string, filter string) (string, []any) {
	var b strings.Builder
	b.WriteString("SELECT ")
	for i, c := range t.Columns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pgx.Identifier{c.Name}.Sanitize())
		b.WriteString("::text")
	}
	b.WriteString(" FROM ")
	b.WriteString(pgx.Identifier{t.Schema, t.Name}.Sanitize())
	b.WriteString(" AS src")
	var args []any
	var conds []string
	if last != nil {
		conds = append(conds, t.compare(">", last, &args))
	}
	if bound != nil {
		conds = append(conds, t.compare("<=", bound, &args))
	}
	if filter != "" {
		conds = append(conds, filter)
	}
	if len(conds) > 0 {
		b.WriteString(" WHERE ")
		b.WriteString(strings.Join(conds, " AND "))
	}
	b.WriteString(" ORDER BY ")
	b.WriteString(strings.Join(t.pageKeyList(), ", "))
	b.WriteString(" FOR SHARE")
	return b.String(), args
}

// pageKeyList names the key columns qualified with the table's alias src:
// unqualified, ORDER BY would sort by the output columns of the same name,
// which are the values cast to text.
func (t Table) pageKeyList() []string {
	keys := make([]string, len(t.PageKey))
	for i, k := range t.PageKey {
		keys[i] = pgx.Identifier{"src", t.Columns[k].Name}.Sanitize()
	}
	return keys
}

// compare is the row comparison (key columns) op (values), the values
// passed as text parameters appended to args and cast to the columns'
// types.
func (t Table) compare(op string, values []string, args *[]any) string {
	params := make([]string, len(t.PageKey))
	for i, k := range t.PageKey {
		*args = append(*args, values[i])
		params[i] = fmt.Sprintf("$%d::text::%s", len(*args), t.types[k])
	}
	return "(" + strings.Join(t.pageKeyList(), ", ") + ") " + op + " (" + strings.Join(params, ", ") + ")"
}
