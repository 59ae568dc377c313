package capture

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walcast/walcast/host/internal/pg"
	"github.com/walcast/walcast/host/internal/source/pgoutput"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/host/internal/source/decode"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Config describes what to capture and how.
type Config struct {
	// DSN of the source database (a normal connection string; the
	// replication connection is derived from it).
	DSN         string
	Slot        string
	Publication string
	// KeylessPublication, when set, is streamed with Publication (see
	// Prepared.KeylessPublication).
	KeylessPublication string
	// Tables are the captured tables, "schema.table".
	Tables []string
	// AllowKeyless lets tables without a key be captured; their events
	// carry key null.
	AllowKeyless bool
	// ApplicationName shows up in pg_stat_replication.
	ApplicationName string
	// StatusInterval is the longest time between two standby status
	// updates. Default 10s; it must stay well under the server's
	// wal_sender_timeout.
	StatusInterval time.Duration
	// PrimaryKey, when set, names a table's primary key columns; the
	// decoder uses it for tables with REPLICA IDENTITY FULL.
	PrimaryKey func(ctx context.Context, schema, table string) ([]string, error)
	// Shapes keeps the captured tables' shapes across sessions and
	// restarts, so that schema events are emitted at the same positions
	// whichever session decodes them (decode.Shapes). nil keeps them in
	// memory only.
	Shapes ShapeStore
	Logger *slog.Logger
	// AcceptGap lets Prepare replace a slot that was lost, invalidated,
	// left behind in another cluster or made undecodable by a dropped
	// publication: it creates a new slot and records the gap (every
	// change between each sink's checkpoint and the new slot's start is
	// not delivered). Without it Prepare refuses with a GapError.
	AcceptGap bool
	// Sinks names the pipeline's sinks, for the gap records.
	Sinks []string
	// Pipeline names the pipeline whose backfill chunks the stream decodes
	// into read events.
	Pipeline string
	// Formats are the output formats the decoder writes next to the
	// envelope (decode.Options.Formats).
	Formats []decode.Format
	// Fence, when set, says whether this process may still use the slot:
	// while it is false, no connection is opened and no position is
	// confirmed (a leader frozen past its lease, see package leader).
	Fence func() bool
	// Confirm, when set, records a position before it is confirmed to the
	// slot (the confirm limit of the pipeline's Record), so that the next
	// Prepare can tell a slot moved by someone else. ConfirmLimit is the position
	// already recorded (Prepared.ConfirmLimit).
	Confirm      ConfirmRecorder
	ConfirmLimit uint64
	// Watch, when set, is called every WatchEvery (default 10 s) while
	// Run streams (reconnects included), from one goroutine, one call at
	// a time; an error it returns ends Run with that error (see
	// PublicationWatch: a table removed from the publication by hand).
	// Whoever needs more than one periodic check of the source composes
	// them into this one function (the daemon adds its slot WAL watch).
	Watch      func(context.Context) error
	WatchEvery time.Duration
	// ReceiveTimeout ends a stream on which nothing arrived for this long
	// (not even the keepalive requested at half of it) and reconnects
	// (silence.go). 0: twice the server's wal_sender_timeout, read at each
	// connection, or 2 minutes when that is 0 or cannot be read.
	ReceiveTimeout time.Duration
	// DDLEvents installs an event trigger that writes each DDL command
	// on a table into the stream (decode.DDLPrefix), so that a change of
	// shape becomes a schema event at the command's commit even with no
	// row change after it.
	DDLEvents bool
	// MessagePrefixes select the application messages that become
	// message events (decode.Options.MessagePrefixes).
	MessagePrefixes []string
	// PartitionDeletes: the rows of a partition detached or truncated,
	// as walcast's partition triggers write them, become deletes of the
	// table (source on_detach = "delete"; decode.PartitionPrefix).
	PartitionDeletes bool
	// PartitionDetachEvents: a partition detached gives one detach event
	// instead of its rows' deletes (source on_detach = "event").
	PartitionDetachEvents bool
	// BeforeCreateSlot, when set, is called by Prepare right before it
	// creates the slot (never when it adopts one), with the walcast
	// schema migrated: what must be on record as of a point no later
	// than the slot's start is recorded there (the daemon's baseline of
	// the captured tables' partitions). An error fails the start.
	BeforeCreateSlot func(context.Context) error
	// Timeouts, when set, counts the streams ended by ReceiveTimeout;
	// captures that follow one another (a sink's catch-up streams) share
	// one. New makes one when it is nil.
	Timeouts *ReceiveTimeouts
}

// ConfirmRecorder durably records the furthest position that may be
// confirmed to the slot.
type ConfirmRecorder interface {
	RaiseConfirmLimit(ctx context.Context, lsn uint64) error
}

// Consumer receives the decoded stream. All methods are called from the
// capture goroutine, in stream order.
type Consumer interface {
	// Event hands over one change. It may block while a durable sink's
	// queue is full; while blocked it must call idle every few hundred
	// milliseconds so the capture loop can keep answering the server.
	// Capture never hands over an event or a commit twice, reconnects
	// included: ids strictly increase.
	Event(ctx context.Context, ev change.Event, idle func()) error
	// Commit marks the end of the transaction whose events were just
	// handed over; endLSN is its end LSN (the position to confirm once the
	// transaction is resolved everywhere).
	Commit(commitLSN, endLSN uint64)
	// Flush is the LSN that may be confirmed to PostgreSQL now.
	Flush() uint64
	// AdvanceIdle moves the flush position to a keepalive's server WAL
	// end when nothing is in flight; capture calls it only between
	// transactions.
	AdvanceIdle(walEnd uint64) bool
}

// Capture streams one slot. Create it with New, call Run, then Close.
type Capture struct {
	cfg      Config
	consumer Consumer
	log      *slog.Logger
	dec      *decode.Decoder
	parser   pgoutput.Parser // reuses its row messages: one message at a time
	// streamCtx is the context of the stream being read, for the primary
	// key lookups the decoder makes (set and read by the capture goroutine).
	streamCtx context.Context

	conn    *pgconn.PgConn
	sentAt  time.Time
	sentPos uint64
	// finalDeadline bounds Close's last status update (zero while
	// streaming: each update then gets the receive timeout).
	finalDeadline time.Time
	// lastEvent and lastEnd are the last event and commit handed to the
	// consumer. After a reconnect PostgreSQL resends everything after the
	// slot's confirmed position, and whatever is at or below them is
	// skipped here, once for every consumer.
	lastEvent cdc.EventID
	lastEnd   uint64
	// Also read by other goroutines (metrics).
	received  atomic.Uint64 // highest WAL position seen on the stream
	streaming atomic.Bool
	// With Config.Confirm: the position recorded as confirmable, the
	// position the consumer would confirm, and a wake-up for the
	// goroutine that records it.
	allowed, wanted atomic.Uint64
	raise           chan struct{}
	// commitEnd is the end of the last transaction the stream delivered:
	// a flush position not past it with the recorded limit moved only by
	// idle advances, over WAL without changes.
	commitEnd atomic.Uint64

	// The receive timeout (silence.go): the current stream's, in
	// nanoseconds; when the loop last heard from the server (unix
	// nanoseconds, as of its last check); when it asked for a keepalive
	// that has not come yet (0: none outstanding). Read by other
	// goroutines (Silence).
	timeout, heardAt, pingedAt atomic.Int64
	timeouts                   *ReceiveTimeouts
	// bytesIn counts the bytes read from the replication socket: a
	// message larger than what arrives within the receive timeout is
	// still being heard from while its bytes flow (silence.go).
	bytesIn atomic.Uint64
	// silentStreak counts the streams in a row that went silent midway;
	// each doubles the next stream's receive
	// timeout (silence.go, stretchedTimeout).
	silentStreak int
	// Warnings about the setting, given once per capture.
	warnedShort, warnedUnread bool
}

// New returns a capture for cfg feeding consumer.
func New(cfg Config, consumer Consumer) *Capture {
	if cfg.StatusInterval <= 0 {
		cfg.StatusInterval = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Timeouts == nil {
		cfg.Timeouts = &ReceiveTimeouts{}
	}
	c := &Capture{
		cfg:      cfg,
		consumer: consumer,
		log:      cfg.Logger,
		raise:    make(chan struct{}, 1),
		timeouts: cfg.Timeouts,
	}
	c.allowed.Store(cfg.ConfirmLimit)
	var pk func(schema, table string) ([]string, error)
	if cfg.PrimaryKey != nil {
		// The decoder asks while decoding a message of the stream: the
		// lookup runs under the stream's context, so it ends with it.
		pk = func(schema, table string) ([]string, error) {
			ctx := c.streamCtx
			if ctx == nil {
				ctx = context.Background()
			}
			return cfg.PrimaryKey(ctx, schema, table)
		}
	}
	opts := decode.Options{PrimaryKey: pk, Tables: listed(cfg.Tables), Pipeline: cfg.Pipeline, Formats: cfg.Formats,
		MessagePrefixes: cfg.MessagePrefixes, PartitionDeletes: cfg.PartitionDeletes,
		PartitionDetachEvents: cfg.PartitionDetachEvents}
	if cfg.Shapes != nil {
		opts.Shapes = streamShapes{c: c, store: cfg.Shapes}
	}
	c.dec = decode.New(opts)
	return c
}

// ShapeStore is where the captured tables' shapes are kept (the
// control plane's walcast.table_shapes). Its methods are called while
// the stream decodes a Relation message and block it for as long as
// ctx, the stream's, allows.
type ShapeStore interface {
	LoadShapes(ctx context.Context) ([]decode.ShapeRecord, error)
	RecordShape(ctx context.Context, rec decode.ShapeRecord) error
}

// streamShapes is a ShapeStore under the stream's context, as the
// decoder calls it.
type streamShapes struct {
	c     *Capture
	store ShapeStore
}

func (s streamShapes) ctx() context.Context {
	if s.c.streamCtx == nil {
		return context.Background()
	}
	return s.c.streamCtx
}

func (s streamShapes) Load() ([]decode.ShapeRecord, error) { return s.store.LoadShapes(s.ctx()) }
func (s streamShapes) Record(rec decode.ShapeRecord) error { return s.store.RecordShape(s.ctx(), rec) }

// checkEvery is how many messages the capture loop reads between two
// looks at the clock (status update due, read deadline).
const checkEvery = 64

// feedbackDelay is how soon a moved flush position is confirmed: often
// enough that WAL is released promptly, rarely enough to cost nothing.
const feedbackDelay = 100 * time.Millisecond

// Run streams until ctx ends, reconnecting with backoff when the
// connection is lost (PostgreSQL restarting, network trouble). It returns
// nil when ctx ends, or an error that reconnecting cannot fix (the slot or
// publication was dropped). The connection stays open after Run returns so
// that Close can confirm the final position.
func (c *Capture) Run(ctx context.Context) error {
	var guard sync.WaitGroup
	defer guard.Wait()
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if c.cfg.Confirm != nil {
		guard.Go(func() { c.recordConfirms(ctx, stop) })
	}
	if c.cfg.Watch != nil {
		guard.Go(func() { c.watch(ctx, stop) })
	}
	backoff := 100 * time.Millisecond
	for {
		started := time.Now()
		err := c.stream(ctx)
		if ctx.Err() != nil {
			return watchErr(ctx)
		}
		if isFatal(err) {
			return err
		}
		var silent receiveTimeoutError
		c.noteStreamEnd(err)
		if time.Since(started) > 30*time.Second || errors.As(err, &silent) {
			// A stream that went silent had been working: reconnect
			// promptly.
			backoff = 100 * time.Millisecond
		}
		if errors.As(err, &silent) {
			c.timeouts.add(time.Now())
			c.log.Warn("replication stream silent for the receive timeout: ending it and reconnecting",
				"slot", c.cfg.Slot, "silent_for", silent.Silent.Round(time.Millisecond), "receive_timeout", silent.Timeout,
				"receive_timeouts", c.timeouts.Count(), "retry_in", backoff, "err", err)
		} else {
			c.log.Warn("replication stream interrupted; reconnecting", "err", err, "retry_in", backoff)
		}
		c.closeConn(ctx)
		select {
		case <-ctx.Done():
			return watchErr(ctx)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// watchError carries Config.Watch's error through the stream's context.
type watchError struct{ err error }

func (w watchError) Error() string { return w.err.Error() }

// watchErr is what Run returns once ctx ended: Config.Watch's error when
// that is what stopped it, else nil (the caller stopped it).
func watchErr(ctx context.Context) error {
	var w watchError
	if errors.As(context.Cause(ctx), &w) {
		return w.err
	}
	return nil
}

// watch runs Config.Watch until ctx ends or it reports an error, which
// stops the stream.
func (c *Capture) watch(ctx context.Context, stop context.CancelCauseFunc) {
	every := c.cfg.WatchEvery
	if every <= 0 {
		every = watchEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.cfg.Watch(ctx); err != nil && ctx.Err() == nil {
			var gap *GapError
			if errors.As(err, &gap) && gap.AnnouncedAt > 0 {
				c.awaitFlush(ctx, gap.AnnouncedAt)
			}
			stop(watchError{err})
			return
		}
	}
}

// awaitFlush waits, for at most announceWait, until every durable sink
// has resolved the transaction at lsn (the schema events of tables that
// vanished), so that the stop the watch is about to make comes after
// them.
func (c *Capture) awaitFlush(ctx context.Context, lsn uint64) {
	deadline := time.Now().Add(announceWait)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for c.consumer.Flush() <= lsn {
		if time.Now().After(deadline) {
			c.log.Warn("stopping before every sink got the schema event of a dropped or renamed table", "waited", announceWait)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// announceWait bounds awaitFlush.
const announceWait = 30 * time.Second

// finalStatusTimeout bounds Close's last standby status update when its
// context has no deadline.
const finalStatusTimeout = 5 * time.Second

// Close sends a last standby status update with the consumer's flush
// position and closes the connection. Both end by ctx's deadline
// (finalStatusTimeout when it has none): a server that stopped reading,
// behind a network that drops packets without a reset, lets the socket's
// send queue fill, and a write with no deadline would then hang the stop
// for as long as the kernel keeps the connection.
func (c *Capture) Close(ctx context.Context) error {
	if c.conn == nil {
		return nil
	}
	if c.cfg.Confirm != nil {
		// The last confirmation of a graceful stop: record it first.
		if w := c.consumer.Flush(); w > c.allowed.Load() {
			if err := c.cfg.Confirm.RaiseConfirmLimit(ctx, w); err == nil {
				c.allowed.Store(w)
			}
		}
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(finalStatusTimeout)
	}
	// pglogrepl ignores the context it is given: the socket's own write
	// deadline is what bounds the send.
	bound := time.Until(deadline)
	c.finalDeadline = deadline
	err := c.sendStatus(false)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("the server did not take the final standby status update within %s (what it does not confirm is sent again on the next start): %w",
			bound.Round(time.Millisecond), err)
	}
	c.closeConn(ctx)
	return err
}

// Abandon closes the replication connection without confirming anything:
// for a process that lost the pipeline's leadership, whose successor owns
// the slot's position now.
func (c *Capture) Abandon() { c.closeConn(context.Background()) }

// closeConn closes the connection, waiting at most 2s (and no longer than
// ctx allows) for the server to take the goodbye.
func (c *Capture) closeConn(ctx context.Context) {
	if c.conn != nil {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c.conn.Close(ctx)
		cancel()
		c.conn = nil
	}
}

func (c *Capture) connect(ctx context.Context) error {
	if c.cfg.Fence != nil && !c.cfg.Fence() {
		return errors.New("open replication connection: the pipeline's leadership is not confirmed")
	}
	pcfg, err := pgconn.ParseConfig(c.cfg.DSN)
	if err != nil {
		return fatalError{fmt.Errorf("parse source dsn: %w", err)}
	}
	pcfg.RuntimeParams["replication"] = "database"
	// The decoder relies on these: timestamps in UTC, ISO dates.
	pcfg.RuntimeParams["TimeZone"] = "UTC"
	pcfg.RuntimeParams["DateStyle"] = "ISO, MDY"
	pcfg.RuntimeParams["IntervalStyle"] = "postgres"
	pcfg.RuntimeParams["extra_float_digits"] = "3"
	if c.cfg.ApplicationName != "" {
		pcfg.RuntimeParams["application_name"] = c.cfg.ApplicationName
	}
	if pcfg.ConnectTimeout == 0 {
		pcfg.ConnectTimeout = 10 * time.Second
	}
	pcfg.DialFunc = dialCounted(dialBatched(pcfg.DialFunc), &c.bytesIn)
	conn, err := pgconn.ConnectConfig(ctx, pcfg)
	if err != nil {
		err = pg.ConnectFailed("connect to", pcfg, err)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pg.Permanent(err) {
			// Wrong password, no REPLICATION privilege, database gone:
			// waiting will not fix these; say so and stop.
			return fatalError{fmt.Errorf("open replication connection: %w (check the dsn's user, password and database, and that the user has the REPLICATION attribute)", err)}
		}
		return fmt.Errorf("open replication connection: %w", err)
	}
	c.conn = conn
	return nil
}

func (c *Capture) stream(ctx context.Context) error {
	c.streamCtx = ctx
	if err := c.connect(ctx); err != nil {
		return err
	}
	c.dec.Reset()
	timeout := c.stretchedTimeout(c.receiveTimeout(ctx))
	if err := c.startReplication(ctx); err != nil {
		return err
	}
	c.timeout.Store(int64(timeout))
	c.pingedAt.Store(0)
	c.heardAt.Store(time.Now().UnixNano())
	c.streaming.Store(true)
	defer c.streaming.Store(false)
	c.log.Info("streaming from slot", "slot", c.cfg.Slot, "publication", c.cfg.Publication, "confirmed", cdc.FormatLSN(c.consumer.Flush()),
		"receive_timeout", timeout)
	c.sentAt = time.Time{}
	c.sentPos = 0
	return c.receive(ctx, &silenceWatch{timeout: timeout, last: time.Now(), bytes: c.bytesIn.Load()})
}

// startReplication starts streaming the slot on the new connection.
func (c *Capture) startReplication(ctx context.Context) error {
	names := []string{c.cfg.Publication}
	if c.cfg.KeylessPublication != "" {
		names = append(names, c.cfg.KeylessPublication)
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		// pgoutput splits the list on commas and reads each name as
		// an identifier: quote it so case and commas survive.
		quoted[i] = `"` + strings.ReplaceAll(n, `"`, `""`) + `"`
	}
	pubs := "publication_names '" + strings.ReplaceAll(strings.Join(quoted, ","), "'", "''") + "'"
	args := []string{"proto_version '1'", pubs}
	if SupportsMessages(c.conn.ParameterStatus("server_version")) {
		// Backfill chunks travel as transactional logical decoding
		// messages, which pgoutput sends only when asked (PostgreSQL 14+).
		args = append(args, "messages 'true'")
	}
	err := pglogrepl.StartReplication(ctx, c.conn, c.cfg.Slot, 0, pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: args,
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			if f := c.fatalServerError(ctx, pgErr); f != nil {
				return f
			}
		}
		return fmt.Errorf("start replication from slot %s: %w", c.cfg.Slot, err)
	}
	return nil
}

// receive reads the stream until it fails, ends, goes silent for the
// receive timeout (w), or ctx ends.
func (c *Capture) receive(ctx context.Context, w *silenceWatch) error {
	idle := func() { c.maybeSendStatus() }

	// A short read deadline instead of a context per message: the context
	// watcher costs a goroutine hand-off per read, the deadline costs
	// nothing, and the loop comes back often enough to confirm positions,
	// watch for silence and notice shutdown. The clock is read, the status
	// and the silence checked and the deadline moved only every checkEvery
	// messages (and after every timeout): both cost a clock read, which on
	// this project's VMs is a measurable part of a change's CPU
	// (docs/benchmarks.md, "Issue 16"). The
	// deadline is absolute, so the loop still comes back within
	// feedbackDelay of the last check.
	received := 0
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if received%checkEvery == 0 {
			now := time.Now()
			if err := c.checkSilence(now, w); err != nil {
				return err
			}
			if err := c.maybeSendStatus(); err != nil {
				return err
			}
			c.conn.Conn().SetReadDeadline(now.Add(feedbackDelay))
		}
		received++
		raw, err := c.conn.ReceiveMessage(context.Background())
		if err != nil {
			var netErr net.Error
			if errors.As(err, &netErr) && netErr.Timeout() {
				received = 0
				continue
			}
			return fmt.Errorf("receive from replication stream: %w", err)
		}
		c.arrived(w)
		switch msg := raw.(type) {
		case *pgproto3.CopyData:
			if err := c.handleCopyData(ctx, msg.Data, idle); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			pgErr := pgconn.ErrorResponseToPgError(msg)
			if f := c.fatalServerError(ctx, pgErr); f != nil {
				return f
			}
			return fmt.Errorf("replication stream: %w", pgErr)
		case *pgproto3.CopyDone:
			return errors.New("replication stream ended by the server")
		default:
			// Notices and parameter status changes need no answer.
		}
	}
}

func (c *Capture) handleCopyData(ctx context.Context, data []byte, idle func()) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("parse keepalive: %w", err)
		}
		c.noteReceived(uint64(ka.ServerWALEnd))
		// Everything the server decoded up to its WAL end has been sent
		// before this keepalive. With no transaction open and nothing in
		// flight there is nothing below it left to protect.
		if !c.dec.InTransaction() {
			c.consumer.AdvanceIdle(uint64(ka.ServerWALEnd))
		}
		if ka.ReplyRequested {
			return c.sendStatus(false)
		}
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("parse XLogData: %w", err)
		}
		c.noteReceived(uint64(xld.WALStart))
		msg, err := c.parser.Parse(xld.WALData)
		if err != nil {
			return fmt.Errorf("parse pgoutput message at %s: %w", cdc.FormatLSN(uint64(xld.WALStart)), err)
		}
		if commit, ok := msg.(*pglogrepl.CommitMessage); ok {
			if err := c.dec.Decode(msg, nil); err != nil {
				return err
			}
			if end := uint64(commit.TransactionEndLSN); end > c.lastEnd {
				c.lastEnd = end
				c.consumer.Commit(uint64(commit.CommitLSN), end)
				c.commitEnd.Store(end)
			}
			return nil
		}
		err = c.dec.Decode(msg, func(ev change.Event) error {
			if !c.lastEvent.IsZero() && ev.ID.Compare(c.lastEvent) <= 0 {
				return nil // resent after a reconnect: already handed over
			}
			if err := c.consumer.Event(ctx, ev, idle); err != nil {
				return err
			}
			c.lastEvent = ev.ID
			return nil
		})
		if m, ok := msg.(*pglogrepl.LogicalDecodingMessage); ok && err == nil && !m.Transactional {
			c.commitMessage(uint64(m.LSN))
		}
		return err
	}
	return nil
}

// commitMessage ends the one-event "transaction" of a non-transactional
// message event PostgreSQL reported at lsn, if one was handed over: lsn
// is the end of the message's WAL record, so confirming it releases the
// message and nothing after it (a transaction committing right there is
// decoded again).
func (c *Capture) commitMessage(lsn uint64) {
	commitLSN := decode.NonTransactionalLSN(lsn)
	if c.lastEvent.CommitLSN != commitLSN || lsn <= c.lastEnd {
		return // not a message event of ours, or already committed
	}
	c.lastEnd = lsn
	c.consumer.Commit(commitLSN, lsn)
	c.commitEnd.Store(lsn)
}

func (c *Capture) noteReceived(lsn uint64) {
	if lsn > c.received.Load() {
		c.received.Store(lsn) // only the capture goroutine writes it
	}
}

// Received is the highest WAL position received from the server (for
// metrics; safe to call from any goroutine).
func (c *Capture) Received() uint64 { return c.received.Load() }

// Unlisted is how many changes of tables outside Config.Tables the
// publication delivered and capture dropped (a FOR ALL TABLES publication,
// or a table added to it by hand).
func (c *Capture) Unlisted() uint64 { return c.dec.Unlisted() }

// listed is the set of configured tables, each as "schema.table".
func listed(tables []string) map[string]bool {
	if len(tables) == 0 {
		return nil
	}
	m := make(map[string]bool, len(tables))
	for _, t := range tables {
		m[canonical(t)] = true
	}
	return m
}

// Streaming reports whether the replication stream is up (for metrics;
// safe to call from any goroutine).
func (c *Capture) Streaming() bool { return c.streaming.Load() }

// maybeSendStatus confirms the consumer's flush position when it moved
// (after feedbackDelay) or when StatusInterval has passed.
func (c *Capture) maybeSendStatus() error {
	since := time.Since(c.sentAt)
	if since < feedbackDelay {
		return nil
	}
	if c.flushPosition() == c.sentPos && since < c.cfg.StatusInterval {
		return nil
	}
	return c.sendStatus(false)
}

// flushPosition is the position to confirm: the consumer's, held at the
// recorded limit while a higher one is being recorded (Config.Confirm).
func (c *Capture) flushPosition() uint64 {
	f := c.consumer.Flush()
	if c.cfg.Confirm == nil {
		return f
	}
	c.wanted.Store(f)
	if a := c.allowed.Load(); f > a {
		select {
		case c.raise <- struct{}{}:
		default:
		}
		return a
	}
	return f
}

// confirmRecordEvery bounds how often the confirm limit is written while
// transactions are being confirmed. Each write is WAL too, which an idle
// stream then confirms (an idle advance), records and confirms again:
// after one idle advance has been recorded, the next ones are recorded at
// most every idleRecordEvery, so that an idle pipeline costs one small
// write every 10 s, not a write loop, and the slot still reaches any
// position within about that time. The first idle advance after confirmed
// transactions is recorded as promptly as they are: it is how the end of
// a burst (the WAL past its last commit) gets confirmed, and making it
// wait 10 s held the slot behind for that long after every drain.
const (
	confirmRecordEvery = 200 * time.Millisecond
	idleRecordEvery    = 10 * time.Second
)

// recordConfirms records the positions flushPosition holds back, so that
// they can be confirmed. A failed write is retried on a later wake-up;
// until one succeeds nothing more is confirmed, which only keeps WAL. An
// error retrying cannot fix (a privilege revoked) stops the stream with it
// instead, as every other loop against the source does (pg.Permanent).
func (c *Capture) recordConfirms(ctx context.Context, stop context.CancelCauseFunc) {
	warned := false
	var last time.Time
	lastIdle := false // the last recorded position came from an idle advance
	retry := time.NewTimer(time.Hour)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.raise:
		case <-retry.C:
		}
		w, a := c.wanted.Load(), c.allowed.Load()
		if w <= a {
			continue
		}
		// Only idle advances since the recorded position: no transaction
		// ended past it.
		idle := c.commitEnd.Load() <= a
		every := confirmRecordEvery
		if idle && lastIdle {
			every = idleRecordEvery
		}
		if wait := every - time.Since(last); wait > 0 {
			retry.Reset(wait)
			continue
		}
		last = time.Now()
		if err := c.cfg.Confirm.RaiseConfirmLimit(ctx, w); err != nil {
			if pg.Permanent(err) && ctx.Err() == nil {
				stop(watchError{fmt.Errorf("record the position to confirm: %w", err)})
				return
			}
			if ctx.Err() == nil && !warned {
				c.log.Warn("cannot record the position to confirm; confirming to the slot waits (it retains WAL meanwhile)", "err", err)
				warned = true
			}
			continue
		}
		c.allowed.Store(w)
		lastIdle = idle
		warned = false
	}
}

func (c *Capture) sendStatus(reply bool) error {
	if c.conn == nil {
		return nil
	}
	if c.cfg.Fence != nil && !c.cfg.Fence() {
		// Confirm nothing until the leadership is confirmed; the next
		// status update tries again.
		return nil
	}
	flush := c.flushPosition()
	// pglogrepl ignores the context it is given: the socket's write
	// deadline is what bounds the send. A server that takes no status
	// update for a whole receive timeout (a black-holed connection whose
	// send queue is full) is treated like a silent one: the stream ends
	// and reconnects instead of blocking the capture in the write.
	deadline := c.finalDeadline
	if deadline.IsZero() {
		bound := time.Duration(c.timeout.Load())
		if bound <= 0 {
			bound = finalStatusTimeout
		}
		deadline = time.Now().Add(bound)
	}
	sock := c.conn.Conn()
	sock.SetWriteDeadline(deadline)
	defer sock.SetWriteDeadline(time.Time{})
	// Every position is set explicitly: pglogrepl copies the write
	// position into zero flush/apply positions, which would confirm what
	// no sink has acknowledged.
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), c.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pglogrepl.LSN(flush),
		WALFlushPosition: pglogrepl.LSN(flush),
		WALApplyPosition: pglogrepl.LSN(flush),
		ClientTime:       time.Now(),
		ReplyRequested:   reply,
	})
	if err != nil {
		return fmt.Errorf("send standby status update: %w", err)
	}
	c.sentAt = time.Now()
	c.sentPos = flush
	return nil
}

// fatalServerError explains the server errors that reconnecting cannot
// fix, quoting PostgreSQL's reason; nil for the others.
func (c *Capture) fatalServerError(ctx context.Context, pgErr *pgconn.PgError) error {
	reason := pgErr.Message
	if pgErr.Detail != "" {
		reason += ": " + pgErr.Detail
	}
	switch {
	case pgErr.Code == "42704" && strings.Contains(pgErr.Message, "publication"):
		if gap := c.recreatedPublication(ctx, pgErr.Message); gap != nil {
			return fatalError{fmt.Errorf("replication from slot %s stopped: PostgreSQL says %q (SQLSTATE %s): %w", c.cfg.Slot, reason, pgErr.Code, gap)}
		}
		return fatalError{fmt.Errorf("replication from slot %s stopped: PostgreSQL says %q (SQLSTATE %s): publication %s was dropped while walcast ran. PostgreSQL reads the publication as it was at each change's position in the slot, so creating it again does not help for the changes the slot holds; the next walcast run refuses to start and explains how to accept the gap (walcast run --accept-gap)",
			c.cfg.Slot, reason, pgErr.Code, c.cfg.Publication)}
	case pgErr.Code == "42704":
		return fatalError{fmt.Errorf("replication from slot %s stopped: PostgreSQL says %q (SQLSTATE %s): the slot was dropped while walcast ran, and changes committed since were not captured; the next walcast run refuses to start and explains how to accept the gap (walcast run --accept-gap)",
			c.cfg.Slot, reason, pgErr.Code)}
	case pgErr.Code == "55000" && (strings.Contains(reason, "invalidated") || strings.Contains(reason, "can no longer get changes")):
		return fatalError{fmt.Errorf("replication slot %s is invalidated: PostgreSQL says %q (SQLSTATE %s): it removed WAL the slot still needed (max_slot_wal_keep_size), so changes since the last checkpoints are gone; walcast run --accept-gap replaces the slot and records the gap",
			c.cfg.Slot, reason, pgErr.Code)}
	}
	return nil
}

// SupportsMessages reports whether a server of this version (the
// server_version parameter, e.g. "15.4") streams logical decoding messages
// through pgoutput, which backfill needs: PostgreSQL 14 or later.
func SupportsMessages(serverVersion string) bool {
	major := 0
	for _, r := range serverVersion {
		if r < '0' || r > '9' {
			break
		}
		major = major*10 + int(r-'0')
	}
	return major >= 14
}

// recreatedPublication returns the gap a publication of the pipeline
// dropped and created again under the same name while walcast streamed
// left, when the stream ended on "publication … does not exist" (msg) and
// the publication exists again by now: the slot cannot stream on, and
// saying "dropped" would send the user to re-create what exists already.
// nil when it does not exist (yet), or cannot be looked up: the caller
// says it was dropped, and the next start names what it finds.
func (c *Capture) recreatedPublication(ctx context.Context, msg string) *GapError {
	pub := c.cfg.Publication
	if k := KeylessPublication(pub); strings.Contains(msg, `"`+k+`"`) {
		pub = k
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.cfg.DSN)
	if err != nil {
		return nil
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, pub).Scan(&exists); err != nil || !exists {
		return nil
	}
	return recreatedGap(c.cfg, pub, "see walcast status", true)
}

// fatalError marks errors that reconnecting cannot fix.
type fatalError struct{ error }

func (e fatalError) Unwrap() error { return e.error }

func isFatal(err error) bool {
	var f fatalError
	return errors.As(err, &f)
}
