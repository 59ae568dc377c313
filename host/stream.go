package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/host/internal/control/lineage"
	"github.com/walcast/walcast/host/internal/delivery/rules"
	"github.com/walcast/walcast/host/internal/ledger"
	"github.com/walcast/walcast/host/internal/pg"
	"github.com/walcast/walcast/host/internal/source/backfill"
	"github.com/walcast/walcast/host/internal/source/capture"
	"github.com/walcast/walcast/host/internal/source/decode"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// ErrClosed is returned by Next and Ack once Close has been called.
var ErrClosed = errors.New("walcast stream closed")

// StreamConfig says what to capture.
type StreamConfig struct {
	// DSN is the source database's connection string (URL or key=value
	// form). The user needs the REPLICATION attribute, and the right to
	// create the publication and the walcast schema when they are missing.
	DSN string
	// Tables are the captured tables, "schema.table".
	Tables []string
	// Slot is the replication slot, created when missing. It is the
	// stream's durable identity: reopening the same slot resumes after the
	// last released transaction. Use one slot per consumer.
	Slot string
	// Publication is created when missing (for Tables). Default: Slot.
	Publication string
	// AllowKeyless lets tables without a primary key or replica identity
	// be captured; their events have a nil Key.
	AllowKeyless bool
	// Buffer is how many events capture may read ahead of Next; beyond
	// that it stops reading and the changes wait in the slot. Default 1024.
	Buffer int
	// Logger receives capture's warnings (reconnects and the like).
	// Default: discard.
	Logger *slog.Logger
	// AcceptGap: when the slot was lost, invalidated or belongs to another
	// cluster, or its publication was dropped, Open fails with an error
	// explaining it; set AcceptGap to create a new slot instead and record
	// the gap in the walcast schema (walcast status shows it).
	AcceptGap bool
	// ReceiveTimeout ends the replication connection when nothing has
	// arrived on it for this long, not even the keepalive the stream asks
	// for at half of it (a NAT or firewall dropped the connection, or the
	// server vanished without a reset), and reconnects; Logger gets a
	// warning each time and ReceiveTimeouts counts them. Default: twice
	// the server's wal_sender_timeout, or 2 minutes when that is 0. At
	// least 1 second; keep it at least wal_sender_timeout.
	ReceiveTimeout time.Duration
	// Format is what Event.JSON and Event.JSONKey return, as a daemon's
	// sink with that format delivers it (docs/formats.md): "walcast" (or
	// empty) for the envelope, "debezium" for Debezium's change event with
	// the Debezium settings, "sequin" for Sequin's message (its
	// metadata.consumer named after the slot), "cloudevents" for a
	// CloudEvent (its source "/walcast/<slot>/<database>/<schema>/<table>").
	// Event's other fields are the envelope's in every format.
	Format string
	// Debezium holds the settings of Format "debezium".
	Debezium Debezium
	// CloudEventsTypePrefix starts the type attribute of every event of
	// Format "cloudevents": <prefix>.<schema>.<table>.<op>. Default
	// "com.walcast".
	CloudEventsTypePrefix string
	// MessagePrefixes select application messages: a logical decoding
	// message (pg_logical_emit_message) whose prefix starts with one of
	// them becomes an event with Op "message" (Event.Message;
	// docs/events.md). None may overlap walcast's own "walcast."
	// prefixes. Needs PostgreSQL 14 or later.
	MessagePrefixes []string
	// Filter is a CEL expression of type bool over the event, as a sink's
	// filter (docs/filters.md): Next returns only the events for which it
	// is true. The others are never handed over and need no ack: a
	// transaction of filtered events only is released with the events
	// before it. An event on which the expression fails is handed over
	// as captured with Event.Err set.
	Filter string
	// Transform reshapes each event's rows (docs/filters.md); Event's
	// fields and JSON are the transformed event's.
	Transform Transform
}

// Debezium are the settings of the debezium format, as a sink's debezium
// block has them (docs/reference/settings.md).
type Debezium struct {
	// Name is the logical server name in source.name and the schema
	// names. Default: the slot's name.
	Name string
	// Schemas wraps key and value in {"schema":…,"payload":…}.
	Schemas bool
	// DecimalHandlingMode is "precise" (default), "double" or "string".
	DecimalHandlingMode string
}

// Stream delivers the committed changes of the captured tables in commit
// order and advances the slot to what the consumer acknowledges. Next must
// be called from one goroutine at a time; Ack and Close may be called from
// any goroutine.
type Stream struct {
	events *handoff
	// taken holds the events Next took from the handoff at once; next is
	// the first not yet returned. Only Next uses them.
	taken []change.Event
	next  int
	times commitTimes
	acks  *acks
	capt  *capture.Capture
	pool  *pgxpool.Pool

	stop    context.CancelFunc
	drain   context.CancelFunc // stops handing events over (Close)
	slot    string
	done    chan struct{} // closed when the capture goroutine has returned
	runErr  error         // capture's error; read after done
	closeMu sync.Mutex
	closed  bool

	pipeline string
	tables   []string
	filler   *backfill.Runner
	fillDone chan struct{} // closed when the backfill runner has returned
}

// Open prepares the source (checks wal_level and the tables, creates the
// publication and the slot when missing) and starts streaming from the
// slot in a background goroutine. ctx bounds only this setup: the stream
// runs until Close.
//
// Open records the stream in the walcast schema of the source database,
// as pipeline "library:<slot>", so that walcast's tools know the slot.
func Open(ctx context.Context, cfg StreamConfig) (*Stream, error) {
	cfg.setDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	rs, err := cfg.compileRules()
	if err != nil {
		return nil, err
	}
	pool, err := connect(ctx, cfg.DSN)
	if err != nil {
		return nil, err
	}
	ccfg, prep, err := prepareSource(ctx, pool, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return start(ctx, pool, cfg, ccfg, prep, rs), nil
}

func (cfg *StreamConfig) setDefaults() {
	if cfg.Publication == "" {
		cfg.Publication = cfg.Slot
	}
	if cfg.Buffer <= 0 {
		cfg.Buffer = 1024
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Format == decode.FormatDebezium {
		cfg.Debezium.Name = cmp.Or(cfg.Debezium.Name, cfg.Slot)
		cfg.Debezium.DecimalHandlingMode = cmp.Or(cfg.Debezium.DecimalHandlingMode, decode.DecimalPrecise)
	}
}

// formats is the output format the stream's decoder writes next to the
// envelope, if any.
func (cfg *StreamConfig) formats() ([]decode.Format, error) {
	if cfg.Format != decode.FormatDebezium && cfg.Format != decode.FormatSequin && cfg.Format != decode.FormatCloudEvents {
		return nil, nil
	}
	pc, err := pgconn.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("open walcast stream: read the database name for the %s format from StreamConfig.DSN: %w", cfg.Format, err)
	}
	switch cfg.Format {
	case decode.FormatSequin:
		return []decode.Format{{Name: decode.FormatSequin, Sequin: decode.SequinOptions{
			Consumer: cfg.Slot, Database: pc.Database, Hostname: pc.Host,
		}}}, nil
	case decode.FormatCloudEvents:
		return []decode.Format{{Name: decode.FormatCloudEvents, CloudEvents: decode.CloudEventsOptions{
			Source:     decode.CloudEventsSource(cfg.Slot, pc.Database),
			TypePrefix: cfg.CloudEventsTypePrefix,
		}}}, nil
	}
	return []decode.Format{{Name: decode.FormatDebezium, Debezium: decode.DebeziumOptions{
		Name: cfg.Debezium.Name, Database: pc.Database, Version: "walcast",
		Schemas: cfg.Debezium.Schemas, Decimal: cfg.Debezium.DecimalHandlingMode,
	}}}, nil
}

// connect opens the pool the stream's setup, confirm limit and backfills
// use, and refuses a role that may not replicate: capture retries a failed
// replication connection forever (it is usually PostgreSQL restarting), so
// a missing privilege would leave Next blocked with no error.
func connect(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	pool, err := capture.Connect(ctx, dsn, 2)
	if err != nil {
		return nil, fmt.Errorf("open walcast stream: %w", err)
	}
	var canReplicate bool
	if err := pool.QueryRow(ctx, `SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&canReplicate); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open walcast stream: check replication privilege: %w", err)
	}
	if !canReplicate {
		pool.Close()
		return nil, errors.New("open walcast stream: the database user lacks the REPLICATION attribute: run ALTER ROLE <user> REPLICATION")
	}
	return pool, nil
}

// prepareSource prepares the slot and the publications as pipeline
// "library:<slot>" and returns the capture configuration that streams
// them.
func prepareSource(ctx context.Context, pool *pgxpool.Pool, cfg StreamConfig) (capture.Config, capture.Prepared, error) {
	formats, err := cfg.formats()
	if err != nil {
		return capture.Config{}, capture.Prepared{}, err
	}
	ccfg := capture.Config{
		Formats:         formats,
		DSN:             cfg.DSN,
		Slot:            cfg.Slot,
		Publication:     cfg.Publication,
		Tables:          cfg.Tables,
		AllowKeyless:    cfg.AllowKeyless,
		ApplicationName: "walcast-library-" + cfg.Slot,
		PrimaryKey:      capture.PrimaryKeyLookup(pool),
		Shapes:          ledger.New(pool, LibraryPipeline(cfg.Slot)),
		Pipeline:        LibraryPipeline(cfg.Slot),
		Logger:          cfg.Logger,
		AcceptGap:       cfg.AcceptGap,
		ReceiveTimeout:  cfg.ReceiveTimeout,
		MessagePrefixes: cfg.MessagePrefixes,
	}
	if len(cfg.MessagePrefixes) > 0 {
		var version string
		if err := pool.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
			return ccfg, capture.Prepared{}, fmt.Errorf("open walcast stream: read server_version: %w", err)
		}
		if !capture.SupportsMessages(version) {
			return ccfg, capture.Prepared{}, fmt.Errorf("open walcast stream: StreamConfig.MessagePrefixes needs PostgreSQL 14 or later (the source runs %s); leave it empty", version)
		}
	}
	prep, err := capture.Prepare(ctx, pool, ledger.New(pool, ccfg.Pipeline), ccfg)
	if err != nil {
		return ccfg, prep, fmt.Errorf("open walcast stream: prepare source for slot %s: %w", cfg.Slot, err)
	}
	ccfg.StatusInterval = min(10*time.Second, prep.WalSenderTimeout/4)
	ccfg.KeylessPublication = prep.KeylessPublication
	ccfg.Confirm, ccfg.ConfirmLimit = lineage.New(pool, ccfg.Pipeline), prep.ConfirmLimit
	ccfg.Watch = capture.PublicationWatch(pool, ccfg, prep.Published)
	return ccfg, prep, nil
}

// start runs capture and the backfill runner, each in a goroutine of its
// own, until Close. They must outlive ctx (which ends with Open) but keep
// its values.
func start(ctx context.Context, pool *pgxpool.Pool, cfg StreamConfig, ccfg capture.Config, prep capture.Prepared, rs *rules.Rules) *Stream {
	events := newHandoff(cfg.Buffer)
	a := newAcks(prep.ConfirmedFlush)
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	drainCtx, drain := context.WithCancel(runCtx)
	capt := capture.New(ccfg, &consumer{events: events, acks: a, drain: drainCtx, rules: rs})
	s := &Stream{events: events, acks: a, capt: capt, pool: pool, stop: stop, drain: drain, slot: cfg.Slot, done: make(chan struct{}),
		pipeline: ccfg.Pipeline, tables: cfg.Tables, fillDone: make(chan struct{})}
	s.filler = backfill.NewRunner(backfill.Config{
		DSN: cfg.DSN, Pipeline: ccfg.Pipeline, Publication: ccfg.Publication, KeylessPublication: ccfg.KeylessPublication, Tables: cfg.Tables, Flushed: a.position, Logger: cfg.Logger,
	})
	go func() {
		defer close(s.fillDone)
		s.filler.Run(runCtx)
	}()
	go func() {
		defer close(s.done)
		// capture calls Event only from here, so ending after Run is
		// safe; Next then drains what is buffered before reporting why
		// the stream ended.
		defer events.end()
		s.runErr = capt.Run(runCtx)
	}()
	return s
}

func (cfg *StreamConfig) check() error {
	switch {
	case cfg.DSN == "":
		return errors.New("open walcast stream: StreamConfig.DSN is empty")
	case len(cfg.Tables) == 0:
		return errors.New("open walcast stream: StreamConfig.Tables is empty; name at least one table as \"schema.table\"")
	case cfg.ReceiveTimeout != 0 && cfg.ReceiveTimeout < time.Second:
		return fmt.Errorf("open walcast stream: StreamConfig.ReceiveTimeout is %s; set at least 1s (a keepalive is asked for at half of it), or 0 for the default", cfg.ReceiveTimeout)
	case !slices.Contains([]string{"", decode.FormatWalcast, decode.FormatDebezium, decode.FormatSequin, decode.FormatCloudEvents}, cfg.Format):
		return fmt.Errorf("open walcast stream: StreamConfig.Format is %q; want \"walcast\" (the envelope, also when empty), \"debezium\", \"sequin\" or \"cloudevents\"", cfg.Format)
	case cfg.Format == decode.FormatDebezium && !slices.Contains([]string{decode.DecimalPrecise, decode.DecimalDouble, decode.DecimalString}, cfg.Debezium.DecimalHandlingMode):
		return fmt.Errorf("open walcast stream: StreamConfig.Debezium.DecimalHandlingMode is %q; want \"precise\", \"double\" or \"string\"", cfg.Debezium.DecimalHandlingMode)
	}
	for _, p := range cfg.MessagePrefixes {
		if problem := pg.CheckMessagePrefix(p); problem != "" {
			return fmt.Errorf("open walcast stream: StreamConfig.MessagePrefixes: %s", problem)
		}
	}
	for _, n := range []struct{ what, name string }{{"Slot", cfg.Slot}, {"Publication", cfg.Publication}} {
		if problem := pg.SlotProblem(n.name); problem != "" {
			return fmt.Errorf("open walcast stream: StreamConfig.%s %q %s", n.what, n.name, problem)
		}
	}
	return nil
}

// Next returns the next change, blocking until there is one or ctx ends
// (then it returns ctx.Err(); the stream stays usable). Events come in
// commit order and, inside a transaction, in the order they were made.
// After Close it returns ErrClosed; if capture stopped for good (the slot
// was dropped) it returns the events already read and then the reason.
// Connection losses are not errors: capture reconnects on its own.
func (s *Stream) Next(ctx context.Context) (Event, error) {
	if err := ctx.Err(); err != nil {
		return Event{}, err
	}
	if s.isClosed() {
		return Event{}, ErrClosed
	}
	if s.next == len(s.taken) {
		taken, err := s.events.take(ctx, s.taken)
		if err != nil {
			return Event{}, err
		}
		s.taken, s.next = taken, 0
	}
	if s.isClosed() {
		// Events still buffered when Close was called are not handed
		// out: their acks could no longer reach PostgreSQL.
		return Event{}, ErrClosed
	}
	if len(s.taken) == 0 {
		<-s.done
		if s.runErr != nil {
			return Event{}, fmt.Errorf("walcast stream from slot: %w", s.runErr)
		}
		return Event{}, ErrClosed
	}
	pe := s.taken[s.next]
	s.next++
	s.acks.deliver(pe.ID)
	return s.times.newEvent(pe)
}

// ReceiveTimeouts is how many times the stream ended a replication
// connection on which nothing arrived within StreamConfig.ReceiveTimeout,
// and reconnected. Safe to call from any goroutine.
func (s *Stream) ReceiveTimeouts() uint64 { return s.capt.ReceiveTimeouts().Count() }

// Ack acknowledges every event at or below id. Once the acknowledged
// events include the last event of a transaction, that transaction is
// released: the slot may move past it, commit record included, and it is
// not delivered again after a restart. Acking part of a transaction
// releases nothing of it; after a restart it is delivered again whole,
// with identical ids.
//
// Ack costs no round trip: the released position reaches PostgreSQL with
// the next status update (within about 100ms) and on Close. Acking an id
// Next has not returned, or one lower than an earlier ack, returns an
// error wrapping ErrInvalidAck; acking the same id again is a no-op.
func (s *Stream) Ack(id cdc.EventID) error {
	if s.isClosed() {
		return ErrClosed
	}
	return s.acks.ack(id)
}

// Close stops streaming, confirms the released position to PostgreSQL,
// waits until the slot shows it, and closes the connections: an ack made
// just before Close is not lost. Unacknowledged events are delivered again
// by the next stream on the same slot. ctx bounds how long Close waits for
// the final confirmation (without a deadline, at most 10 seconds); when it
// ends first, Close still closes everything and reports why the position
// may not have reached PostgreSQL. Calling it again returns nil.
func (s *Stream) Close(ctx context.Context) error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	s.closeMu.Unlock()

	defer s.pool.Close()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	// An ack of a transaction's last event releases it only once capture
	// has read its commit record, which may still be on its way: keep
	// reading (handing nothing more over) until it is, briefly.
	s.drain()
	for s.acks.awaitingCommit() && ctx.Err() == nil {
		select {
		case <-s.done:
		case <-time.After(5 * time.Millisecond):
			continue
		}
		break
	}
	s.stop()
	<-s.done
	<-s.fillDone
	pos := s.acks.position()
	if err := s.capt.Close(ctx); err != nil {
		return fmt.Errorf("close walcast stream: confirm final position %s: %w", cdc.FormatLSN(pos), err)
	}
	// The walsender applies the confirmation as it reads it; wait until
	// the slot shows it, so that a stream opened next starts after it.
	for {
		var lsn string
		err := s.pool.QueryRow(ctx, `SELECT coalesce(confirmed_flush_lsn::text, '0/0') FROM pg_replication_slots WHERE slot_name = $1`, s.slot).Scan(&lsn)
		if err != nil {
			return fmt.Errorf("close walcast stream: check final position %s of slot %s: %w", cdc.FormatLSN(pos), s.slot, err)
		}
		if got, err := cdc.ParseLSN(lsn); err == nil && got >= pos {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("close walcast stream: slot %s did not reach the final position %s: %w", s.slot, cdc.FormatLSN(pos), ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (s *Stream) isClosed() bool {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	return s.closed
}
