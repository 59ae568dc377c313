package capture

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walcast/walcast/host/internal/pg"
	"github.com/walcast/walcast/host/internal/source/decode"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Prepared is the outcome of Prepare.
type Prepared struct {
	// ConfirmedFlush is the slot's confirmed_flush_lsn: PostgreSQL resends
	// every transaction that commits after it.
	ConfirmedFlush uint64
	// CreatedSlot / CreatedPublication report what Prepare created.
	CreatedSlot        bool
	CreatedPublication bool
	// Keyless lists captured tables without a primary key or replica
	// identity (only when AllowKeyless is set).
	Keyless []string
	// KeylessPublication is the pipeline's second publication, which
	// publishes only inserts and truncates of the keyless tables; the slot
	// streams it with the main one. Empty when the pipeline uses a
	// publication walcast did not create.
	KeylessPublication string
	// Unlisted are tables the publication publishes that are not among the
	// configured tables: their changes are dropped after decoding.
	Unlisted []string
	// WalSenderTimeout is the server's wal_sender_timeout; status updates
	// must be sent well within it.
	WalSenderTimeout time.Duration
	// AcceptedGap is the gap Prepare accepted (Config.AcceptGap), if any.
	AcceptedGap *GapError
	// ConfirmLimit is the furthest position recorded as confirmable to
	// the slot (Config.ConfirmLimit of the capture that streams it).
	ConfirmLimit uint64
	// Published is how the publications publish each table, as recorded
	// (see membership, PublicationWatch).
	Published map[string]string
}

// Setup is one start of a pipeline on its source: what Check found there
// before the start created anything, and what the start created since, so
// that a start that fails can remove it (Undo). Its methods are called
// from one goroutine.
type Setup struct {
	db  Querier
	cfg Config
	// checked is the ledger Check read, on db; ledger the one Prepare
	// was given (nil before), which writes the pipeline's records.
	checked, ledger Ledger
	tables          []tableInfo

	// What existed when Check ran.
	hadSchema, hadPipeline bool
	// What this start created, and whether it accepted a gap (recorded
	// in the walcast schema, which then refers to the new slot).
	createdSlot bool
	createdPubs []string
	acceptedGap bool
	// createdTrigger: this start installed the ddl_events trigger.
	createdTrigger bool
}

// Check looks at the source before a start creates anything: it refuses
// with a *NotReadyError naming every problem Preflight finds, else it
// records what exists, so that Undo removes only what the start adds.
func Check(ctx context.Context, db Querier, l Ledger, cfg Config) (*Setup, error) {
	findings, err := Preflight(ctx, db, l, cfg)
	if err != nil {
		return nil, err
	}
	if len(findings) > 0 {
		return nil, &NotReadyError{Findings: findings}
	}
	s := &Setup{db: db, cfg: cfg, checked: l}
	if s.tables, _, err = inspectTables(ctx, db, cfg); err != nil {
		return nil, err
	}
	access, err := l.Access(ctx)
	if err != nil {
		return nil, err
	}
	s.hadSchema = access.Exists
	if s.hadSchema {
		if _, s.hadPipeline, err = l.LoadRecord(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Prepare checks the source (Check), creates the publication and the slot
// when they are missing, and removes what it created when it fails (Undo).
// l is read and written for both.
func Prepare(ctx context.Context, db Querier, l Ledger, cfg Config) (Prepared, error) {
	s, err := Check(ctx, db, l, cfg)
	if err != nil {
		return Prepared{}, err
	}
	p, err := s.Prepare(ctx, l)
	if err != nil {
		if uerr := s.Undo(context.WithoutCancel(ctx)); uerr != nil {
			return p, errors.Join(err, uerr)
		}
		return p, err
	}
	return p, nil
}

// Prepare creates the publication and the slot when they are missing,
// and records the pipeline in the walcast schema (creating the schema when
// missing) through l, from then on the ledger Undo writes too. The
// publication is created before the slot: a slot only decodes with
// publications that existed at its starting point.
func (s *Setup) Prepare(ctx context.Context, l Ledger) (Prepared, error) {
	db, cfg := s.db, s.cfg
	s.ledger = l
	var p Prepared
	var timeoutMS int64
	if err := db.QueryRow(ctx, "SELECT setting::bigint FROM pg_settings WHERE name = 'wal_sender_timeout'").Scan(&timeoutMS); err != nil {
		return p, fmt.Errorf("read wal_sender_timeout: %w", err)
	}
	p.WalSenderTimeout = time.Duration(timeoutMS) * time.Millisecond
	keyless := keylessOf(s.tables)
	p.Keyless = keyless
	if err := l.Migrate(ctx); err != nil {
		return p, err
	}
	st, err := inspect(ctx, db, l, cfg)
	if err != nil {
		return p, err
	}
	rec, known, slot := st.rec, st.known, st.slot
	gap := st.gap
	if gap != nil {
		if !cfg.AcceptGap {
			return p, gap
		}
		if slot.exists && gap.Kind != "publication changed" {
			if slot.active {
				return p, fmt.Errorf("replace replication slot %s: it is in use by another process; stop it first", cfg.Slot)
			}
			if _, err := db.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, cfg.Slot); err != nil {
				return p, fmt.Errorf("drop replication slot %s to accept the gap: %w", cfg.Slot, err)
			}
			slot = slotInfo{}
		}
	}

	ours := known && rec.CreatedPublication && rec.Publication == cfg.Publication
	created, kpub, err := s.ensurePublication(ctx, ours, keyless)
	if err != nil {
		return p, err
	}
	p.CreatedPublication = created
	p.KeylessPublication = kpub
	if cfg.DDLEvents {
		if s.createdTrigger, err = ensureDDLTrigger(ctx, db, cfg.Pipeline); err != nil {
			return p, err
		}
	}
	// Recorded at once: from here on a change of membership was not
	// made by this walcast.
	if p.Published, _, err = membership(ctx, db, cfg); err != nil {
		return p, err
	}
	if err := l.RecordPublished(ctx, p.Published); err != nil {
		return p, err
	}
	if p.Unlisted, err = unlistedTables(ctx, db, cfg); err != nil {
		return p, err
	}
	if err := l.SaveRecord(ctx, Record{Slot: cfg.Slot, Publication: cfg.Publication, CreatedPublication: created || ours}); err != nil {
		return p, err
	}
	if err := s.ensureSlot(ctx, &p, rec, slot); err != nil {
		return p, err
	}
	if err := s.recordIdentity(ctx, &p, st, gap); err != nil {
		return p, err
	}
	return p, nil
}

// ensureSlot adopts the pipeline's slot where it stands, or creates it,
// and records the furthest position walcast may confirm to it.
func (s *Setup) ensureSlot(ctx context.Context, p *Prepared, rec Record, slot slotInfo) error {
	l, name := s.ledger, s.cfg.Slot
	if slot.exists {
		if err := slot.usable(name); err != nil {
			return err
		}
		p.ConfirmedFlush = slot.confirmed
		p.ConfirmLimit = max(rec.ConfirmLimit, slot.confirmed)
		if rec.ConfirmLimit == 0 {
			// Set up by a walcast that did not record the limit, or a
			// crash right after creating the slot: adopt the slot where
			// it stands, as for the slot's incarnation (recordIdentity).
			return l.SetConfirmLimit(ctx, slot.confirmed)
		}
		return nil
	}
	// Cleared first: a crash between creating the slot and recording its
	// start must not look like a slot moved by someone else.
	if err := l.SetConfirmLimit(ctx, 0); err != nil {
		return err
	}
	if s.cfg.BeforeCreateSlot != nil {
		if err := s.cfg.BeforeCreateSlot(ctx); err != nil {
			return err
		}
	}
	var err error
	if p.ConfirmedFlush, err = createSlot(ctx, s.db, name); err != nil {
		return err
	}
	p.CreatedSlot, s.createdSlot = true, true
	if err := l.SetConfirmLimit(ctx, p.ConfirmedFlush); err != nil {
		return err
	}
	p.ConfirmLimit = p.ConfirmedFlush
	return nil
}

// recordIdentity records where the checkpoints belong (cluster, database,
// slot incarnation) and the gap Prepare accepted, if any.
func (s *Setup) recordIdentity(ctx context.Context, p *Prepared, st state, gap *GapError) error {
	l, cfg, rec := s.ledger, s.cfg, st.rec
	id := st.here
	id.SlotCreatedLSN = rec.Identity.SlotCreatedLSN
	if p.CreatedSlot || id.SlotCreatedLSN == 0 {
		// A new incarnation, or (set up by an older walcast) the slot
		// adopted where it stands.
		id.SlotCreatedLSN = p.ConfirmedFlush
	}
	switch {
	case gap != nil && gap.Kind == "publication changed":
		// The slot stays; the tables are published again from here on.
		var here string
		if err := s.db.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&here); err != nil {
			return fmt.Errorf("read the current WAL position to record the gap: %w", err)
		}
		to, err := cdc.ParseLSN(here)
		if err != nil {
			return err
		}
		if err := l.RecordGap(ctx, gap.Reason(), cfg.Sinks, to); err != nil {
			return err
		}
		p.AcceptedGap, s.acceptedGap = gap, true
	case gap != nil:
		if err := l.AcceptGap(ctx, gap.Reason(), cfg.Sinks, p.ConfirmedFlush, id); err != nil {
			return err
		}
		p.AcceptedGap, s.acceptedGap = gap, true
	}
	if id != rec.Identity && (gap == nil || gap.Kind == "publication changed") {
		return l.SetIdentity(ctx, id)
	}
	return nil
}

// Undo removes what this start created, for a start that failed before
// it streamed anything: the slot (unless it is in use), the publications,
// and the walcast schema when the start created it and no other pipeline
// has used it since; when the schema existed, the rows the start wrote
// about a pipeline that had none. A start that accepted a gap keeps what
// it made (the gap and the new slot are recorded), and so does one whose
// slot another process streams by now. Every step is tried; the errors
// are joined.
func (s *Setup) Undo(ctx context.Context) error {
	if s.acceptedGap {
		return nil
	}
	log := s.cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var records Records = s.checked
	if s.ledger != nil {
		records = s.ledger
	}
	// A slot in use means another walcast streams the pipeline by now
	// (this one lost its leadership while starting): what this start
	// created is that walcast's too.
	var inUse bool
	if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1 AND active)`, s.cfg.Slot).Scan(&inUse); err != nil {
		return fmt.Errorf("look up replication slot %s before removing what the failed start created: %w", s.cfg.Slot, err)
	}
	if inUse {
		log.Info("not removing what this failed start created: another process streams from the slot", "slot", s.cfg.Slot)
		return nil
	}
	var errs []error
	if s.createdTrigger {
		if err := DropDDLTrigger(ctx, s.db, s.cfg.Pipeline); err != nil {
			errs = append(errs, err)
		}
	}
	if s.createdSlot {
		if _, err := s.db.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, s.cfg.Slot); err != nil {
			errs = append(errs, fmt.Errorf("drop replication slot %s created by the failed start: %w", s.cfg.Slot, err))
		} else {
			log.Info("dropped the replication slot this failed start created", "slot", s.cfg.Slot)
		}
	}
	for _, pub := range slices.Backward(s.createdPubs) {
		if _, err := s.db.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{pub}.Sanitize()); err != nil {
			errs = append(errs, fmt.Errorf("drop publication %s created by the failed start: %w", pub, err))
		} else {
			log.Info("dropped the publication this failed start created", "publication", pub)
		}
	}
	switch {
	case !s.hadSchema:
		dropped, err := s.dropSchema(ctx)
		switch {
		case err != nil:
			errs = append(errs, err)
		case dropped:
			log.Info("dropped the walcast schema this failed start created", "schema", pg.ControlSchema)
		}
	case !s.hadPipeline:
		errs = append(errs, records.ForgetSetup(ctx))
	case s.createdSlot:
		// Nothing was streamed from the slot: forget its incarnation.
		errs = append(errs, records.ForgetSlot(ctx))
	}
	return errors.Join(errs...)
}

// dropSchema drops the walcast schema this start created, unless another
// pipeline uses it by now: one leads in this database (its start may be
// racing this one), or has rows in it. A standby writes nothing before it
// leads, and the start that makes it lead creates the schema again. Both
// go through the ledger Check read, as Check found the schema missing.
func (s *Setup) dropSchema(ctx context.Context) (bool, error) {
	others, err := s.checked.OthersLead(ctx)
	if err != nil {
		return false, fmt.Errorf("look for other walcast pipelines before dropping schema %s: %w", pg.ControlSchema, err)
	}
	if others {
		return false, nil
	}
	return s.checked.DropUnused(ctx)
}

// state is what Prepare and Diagnose read before changing anything.
type state struct {
	rec   Record
	known bool
	here  Identity
	slot  slotInfo
	gap   *GapError
}

func inspect(ctx context.Context, db Querier, records Records, cfg Config) (state, error) {
	var st state
	var err error
	if st.rec, st.known, err = records.LoadRecord(ctx); err != nil {
		return st, err
	}
	if st.here, err = clusterIdentity(ctx, db, cfg.DSN); err != nil {
		return st, err
	}
	if st.slot, err = lookupSlot(ctx, db, cfg.Slot); err != nil {
		return st, err
	}
	checkpoints, err := records.Checkpoints(ctx)
	if err != nil {
		return st, err
	}
	var pubExists bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, cfg.Publication).Scan(&pubExists); err != nil {
		return st, fmt.Errorf("look up publication %s: %w", cfg.Publication, err)
	}
	st.gap = checkHistory(cfg, cfg.Pipeline, st.rec, st.known, st.here, st.slot, checkpoints, pubExists)
	if st.gap == nil && st.slot.exists && pubExists {
		// Checked before Prepare brings a walcast-made publication back
		// in step with the table list, which would hide a removal.
		recorded, err := records.Published(ctx)
		if err != nil {
			return st, err
		}
		if st.gap, err = checkRecreated(ctx, db, cfg, recorded, checkpointList(checkpoints), false); err != nil || st.gap != nil {
			return st, err
		}
		if len(recorded) > 0 {
			now, names, err := membership(ctx, db, cfg)
			if err != nil {
				return st, err
			}
			st.gap = checkPublished(cfg, recorded, now, names, checkpointList(checkpoints), false)
		}
	}
	return st, nil
}

// Diagnose reports, without changing anything, why walcast run would
// refuse to stream from the pipeline's slot (nil when it would not). The
// walcast schema must be initialised.
func Diagnose(ctx context.Context, db Querier, records Records, cfg Config) (*GapError, error) {
	st, err := inspect(ctx, db, records, cfg)
	return st.gap, err
}

// GapError is Prepare's refusal to stream when changes may have been lost
// under walcast: the slot is gone, invalidated or from another cluster, or
// its publication was dropped. It says what happened and the ways out.
type GapError struct {
	Slot, Publication string
	// Kind is "slot lost", "foreign checkpoints", "slot invalidated",
	// "slot moved", "publication dropped", "publication recreated" or
	// "publication changed". Every kind but "publication changed" needs
	// a new slot, so every table's changes since the checkpoints are
	// lost.
	Kind string
	// Tables are the tables whose changes were lost, for "publication
	// changed" (the slot is fine: accepting the gap keeps it).
	Tables []string
	// Vanished are the listed tables dropped (or no longer published)
	// or renamed, for "publication changed" while streaming; AnnouncedAt
	// is the LSN of the last message that told the stream so
	// (decode.VanishedPrefix), 0 when none was written.
	Vanished    []decode.Vanished
	AnnouncedAt uint64
	// What explains the case; Checkpoints lists the sinks' last
	// checkpoints; Restore is the way out other than accepting the gap.
	What, Checkpoints, Restore, Replace string
}

func (e *GapError) Error() string {
	return fmt.Sprintf("%s; last checkpoints: %s. walcast does not continue silently over lost changes. Either %s, or accept the gap: run walcast run PIPELINE.hcl --accept-gap once (library: StreamConfig.AcceptGap), which %s and records the gap from each sink's checkpoint to where streaming resumes in walcast.gaps (shown by walcast status); then walcast resync PIPELINE.hcl re-reads the tables. on_gap = \"resync\" in the source block does both at every start",
		e.What, e.Checkpoints, e.Restore, e.Replace)
}

// Reason is the short reason stored with an accepted gap.
func (e *GapError) Reason() string {
	if len(e.Tables) > 0 {
		return e.Kind + ": " + strings.Join(e.Tables, ", ")
	}
	return e.Kind
}

// checkHistory compares what the walcast schema remembers of the pipeline
// with the slot as it is now, and returns why streaming would hide lost
// changes, or nil.
func checkHistory(cfg Config, pipeline string, rec Record, known bool, here Identity, slot slotInfo, checkpoints map[string]cdc.EventID, pubExists bool) *GapError {
	// The pipeline has streamed before when it has checkpoints or walcast
	// recorded a slot for it.
	streamed := len(checkpoints) > 0 || (known && rec.Identity.SlotCreatedLSN != 0)
	if !streamed {
		return nil
	}
	e := &GapError{Slot: cfg.Slot, Publication: cfg.Publication, Checkpoints: checkpointList(checkpoints)}
	was := rec.Identity
	switch {
	case was.SystemIdentifier != "" && (was.SystemIdentifier != here.SystemIdentifier || was.DatabaseOID != here.DatabaseOID):
		e.Kind = "foreign checkpoints"
		e.What = fmt.Sprintf("the walcast checkpoints of pipeline %s in this database were made on another cluster or database (system_identifier %s, database oid %d; this is system_identifier %s, database oid %d): the database was restored, copied or upgraded into a new cluster (pg_dump/pg_restore, a base backup, pg_upgrade), so they do not belong to replication slot %s here and would skip its changes as already delivered",
			pipeline, was.SystemIdentifier, was.DatabaseOID, here.SystemIdentifier, here.DatabaseOID, cfg.Slot)
		e.Restore = "point the pipeline's dsn back at the original database"
		e.Replace = "drops any slot named " + cfg.Slot + " here, creates a new one, deletes the old checkpoints"
	case !slot.exists:
		e.Kind = "slot lost"
		e.What = fmt.Sprintf("replication slot %s does not exist, but pipeline %s streamed from it before: it was dropped or lost (pg_drop_replication_slot, a failover to a server without it, a restore), and the changes committed since the checkpoints below can no longer be read", cfg.Slot, pipeline)
		e.Restore = "restore the slot (e.g. point the dsn at the server that still has it)"
		e.Replace = "creates a new slot"
	case slot.walStatus == "lost":
		e.Kind = "slot invalidated"
		e.What = fmt.Sprintf("replication slot %s was invalidated (wal_status lost): PostgreSQL removed WAL the slot still needed because it retained more than max_slot_wal_keep_size, so the changes since the checkpoints below are gone", cfg.Slot)
		e.Restore = "restore the database from a backup taken before the invalidation"
		e.Replace = "drops the invalidated slot, creates a new one"
	case rec.ConfirmLimit != 0 && slot.confirmed > rec.ConfirmLimit:
		e.Kind = "slot moved"
		e.What = fmt.Sprintf("replication slot %s is confirmed up to %s, beyond %s, the furthest position walcast ever confirmed to it: while walcast was not streaming, the slot was dropped and created again under the same name, or advanced by hand (pg_replication_slot_advance), so the changes committed between the checkpoints below and %s were never delivered and can no longer be read",
			cfg.Slot, cdc.FormatLSN(slot.confirmed), cdc.FormatLSN(rec.ConfirmLimit), cdc.FormatLSN(slot.confirmed))
		e.Restore = "restore the database from a backup taken before the slot was moved"
		e.Replace = "drops the slot, creates a new one"
	case !pubExists:
		e.Kind = "publication dropped"
		e.What = fmt.Sprintf("publication %s does not exist but replication slot %s does: the publication was dropped while the slot still holds changes. PostgreSQL reads the publication as it was at each change's position in the slot, so creating it again does not help: every change still in the slot would fail with \"publication %s does not exist\"", cfg.Publication, cfg.Slot, cfg.Publication)
		e.Restore = "restore the database from a backup taken before the publication was dropped"
		e.Replace = "drops the slot, creates the publication and a new slot"
	default:
		return nil
	}
	return e
}

// checkpointList is the sinks' checkpoints for a GapError.
func checkpointList(checkpoints map[string]cdc.EventID) string {
	if len(checkpoints) == 0 {
		return "none"
	}
	names := make([]string, 0, len(checkpoints))
	for s := range checkpoints {
		names = append(names, s)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, s := range names {
		parts[i] = s + " " + checkpoints[s].String()
	}
	return strings.Join(parts, ", ")
}

// slotInfo is a replication slot as pg_replication_slots shows it.
type slotInfo struct {
	exists    bool
	plugin    string
	sameDB    bool
	active    bool
	confirmed uint64
	walStatus string
}

func lookupSlot(ctx context.Context, db Querier, slot string) (slotInfo, error) {
	var s slotInfo
	var lsn string
	err := db.QueryRow(ctx, `
SELECT coalesce(plugin, ''), coalesce(confirmed_flush_lsn::text, '0/0'), database = current_database(), active, coalesce(wal_status, '')
FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&s.plugin, &lsn, &s.sameDB, &s.active, &s.walStatus)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return slotInfo{}, nil
	case err != nil:
		return s, fmt.Errorf("look up replication slot %s: %w", slot, err)
	}
	s.exists = true
	if s.confirmed, err = cdc.ParseLSN(lsn); err != nil {
		return s, fmt.Errorf("read position of slot %s: %w", slot, err)
	}
	return s, nil
}

func (s slotInfo) usable(slot string) error {
	switch {
	case s.plugin != "pgoutput":
		return fmt.Errorf("replication slot %s exists but uses output plugin %q, not pgoutput: choose another slot name", slot, s.plugin)
	case !s.sameDB:
		return fmt.Errorf("replication slot %s belongs to another database: choose another slot name", slot)
	}
	return nil
}

// clusterIdentity is where this database lives: the cluster's
// system_identifier and the database's OID.
func clusterIdentity(ctx context.Context, db Querier, dsn string) (Identity, error) {
	var id Identity
	var oid int64
	if err := db.QueryRow(ctx, `SELECT oid::bigint FROM pg_database WHERE datname = current_database()`).Scan(&oid); err != nil {
		return id, fmt.Errorf("read database oid: %w", err)
	}
	id.DatabaseOID = uint32(oid)
	err := db.QueryRow(ctx, `SELECT system_identifier::text FROM pg_control_system()`).Scan(&id.SystemIdentifier)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		// Not granted to this user: the replication protocol's
		// IDENTIFY_SYSTEM tells the same to any replication user.
		id.SystemIdentifier, err = identifySystem(ctx, dsn)
	}
	if err != nil {
		return id, fmt.Errorf("read the cluster's system_identifier: %w", err)
	}
	return id, nil
}

func qualified(t string) string {
	schema, name, ok := strings.Cut(t, ".")
	if !ok {
		schema, name = "public", t
	}
	return pgx.Identifier{schema, name}.Sanitize()
}

// KeylessPublication names the second publication of a pipeline whose
// publication is pub: it holds the keyless tables. It is cut to
// PostgreSQL's 63-byte identifier limit the way the name must be spelled
// in publication_names (PostgreSQL would cut it silently on CREATE).
func KeylessPublication(pub string) string {
	const suffix, maxLen = "_keyless", 63
	if len(pub)+len(suffix) > maxLen {
		pub = pub[:maxLen-len(suffix)]
	}
	return pub + suffix
}

// The publications walcast creates publish a partitioned table's changes
// under the root's name (the name the user listed), never the leaf
// partitions'. The keyless tables go into a second publication that
// publishes only inserts and truncates: PostgreSQL rejects UPDATE and
// DELETE on a table without a replica identity in a publication that
// publishes them, and walcast must never make the application's writes
// fail.
const (
	publicationOptions        = " WITH (publish_via_partition_root = true)"
	keylessPublicationOptions = " WITH (publish = 'insert, truncate', publish_via_partition_root = true)"
)

// ensurePublication creates or updates the pipeline's publications and
// returns the keyless publication to stream, if any.
func (s *Setup) ensurePublication(ctx context.Context, ours bool, keyless []string) (created bool, keylessPub string, err error) {
	db, cfg := s.db, s.cfg
	var exists bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, cfg.Publication).Scan(&exists); err != nil {
		return false, "", fmt.Errorf("look up publication %s: %w", cfg.Publication, err)
	}
	var keyed, unkeyed []string
	for _, t := range cfg.Tables {
		if slices.Contains(keyless, canonical(t)) {
			unkeyed = append(unkeyed, qualified(t))
		} else {
			keyed = append(keyed, qualified(t))
		}
	}
	pub := pgx.Identifier{cfg.Publication}.Sanitize()
	kpub := KeylessPublication(cfg.Publication)
	switch {
	case !exists:
		// Both publications exist from the start, the keyless one even
		// when empty: PostgreSQL 15 decodes each change with the
		// publications as of that change, and fails on a publication
		// named in publication_names that did not exist yet then.
		if err := s.createPublication(ctx, cfg.Publication, keyed, publicationOptions); err != nil {
			return false, "", err
		}
		// The keyless one may outlive a main publication someone dropped
		// (the gap was accepted and the slot replaced): reuse it.
		var kexists bool
		if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, kpub).Scan(&kexists); err != nil {
			return false, "", fmt.Errorf("look up publication %s: %w", kpub, err)
		}
		if kexists {
			return true, kpub, setPublicationTables(ctx, db, kpub, unkeyed)
		}
		if err := s.createPublication(ctx, kpub, unkeyed, keylessPublicationOptions); err != nil {
			return false, "", err
		}
		return true, kpub, nil
	case ours:
		// walcast made it: keep both in step with the pipeline's table
		// list, and with the options this version creates them with.
		if _, err := db.Exec(ctx, "ALTER PUBLICATION "+pub+" SET (publish_via_partition_root = true)"); err != nil {
			return false, "", fmt.Errorf("set options of publication %s: %w", cfg.Publication, err)
		}
		if err := setPublicationTables(ctx, db, cfg.Publication, keyed); err != nil {
			return false, "", err
		}
		var kexists bool
		if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, kpub).Scan(&kexists); err != nil {
			return false, "", fmt.Errorf("look up publication %s: %w", kpub, err)
		}
		switch {
		case kexists:
			return false, kpub, setPublicationTables(ctx, db, kpub, unkeyed)
		case len(unkeyed) == 0:
			// A pipeline made by an earlier walcast, without keyless
			// tables: creating the keyless publication now would make
			// PostgreSQL fail on the changes written before it.
			return false, "", nil
		default:
			// The keyless tables must leave the main publication; the
			// new publication only applies to changes written from now
			// on (docs/operations.md, "A table without a key").
			return false, kpub, s.createPublication(ctx, kpub, unkeyed, keylessPublicationOptions)
		}
	}
	// Someone else's publication: used as it is, as Preflight checked.
	// Checked again: it may have changed since.
	findings, err := foreignPublication(ctx, db, cfg, s.tables)
	if err != nil {
		return false, "", err
	}
	if len(findings) > 0 {
		return false, "", &NotReadyError{Findings: findings}
	}
	return false, "", nil
}

// createPublication creates a publication of tables (possibly none), and
// remembers it for Undo.
func (s *Setup) createPublication(ctx context.Context, name string, tables []string, options string) error {
	sql := "CREATE PUBLICATION " + pgx.Identifier{name}.Sanitize()
	if len(tables) > 0 {
		sql += " FOR TABLE " + strings.Join(tables, ", ")
	}
	if _, err := s.db.Exec(ctx, sql+options); err != nil {
		return fmt.Errorf("create publication %s: %w", name, err)
	}
	s.createdPubs = append(s.createdPubs, name)
	return nil
}

// setPublicationTables makes tables (possibly none, each spelled by
// qualified) the tables of a publication. It adds and drops only the
// difference rather than SET TABLE, which would also drop a row filter or
// column list someone added by hand to a table that stays (ALTER
// PUBLICATION … SET TABLE t WHERE (…)): the live stream and backfills
// honour those, and a restart must not silently undo them.
func setPublicationTables(ctx context.Context, db Querier, name string, tables []string) error {
	pub := pgx.Identifier{name}.Sanitize()
	// Members spelled the way qualified spells them (pgx.Identifier).
	rows, err := db.Query(ctx, `
SELECT '"' || replace(n.nspname, '"', '""') || '"."' || replace(c.relname, '"', '""') || '"'
FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
JOIN pg_class c ON c.oid = pr.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE p.pubname = $1`, name)
	if err != nil {
		return fmt.Errorf("list tables of publication %s: %w", name, err)
	}
	members, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("list tables of publication %s: %w", name, err)
	}
	var add, drop []string
	for _, t := range tables {
		if !slices.Contains(members, t) && !slices.Contains(add, t) {
			add = append(add, t)
		}
	}
	for _, m := range members {
		if !slices.Contains(tables, m) {
			drop = append(drop, m)
		}
	}
	if len(drop) > 0 {
		if _, err := db.Exec(ctx, "ALTER PUBLICATION "+pub+" DROP TABLE "+strings.Join(drop, ", ")); err != nil {
			return fmt.Errorf("update tables of publication %s: %w", name, err)
		}
	}
	if len(add) > 0 {
		if _, err := db.Exec(ctx, "ALTER PUBLICATION "+pub+" ADD TABLE "+strings.Join(add, ", ")); err != nil {
			return fmt.Errorf("update tables of publication %s: %w", name, err)
		}
	}
	return nil
}

// unlistedTables lists the tables the pipeline's publications publish
// besides the configured ones (a FOR ALL TABLES publication, or a table
// added by hand): their changes are dropped after decoding.
func unlistedTables(ctx context.Context, db Querier, cfg Config) ([]string, error) {
	rows, err := db.Query(ctx, `
SELECT DISTINCT schemaname || '.' || tablename FROM pg_publication_tables
WHERE pubname IN ($1, $2) AND schemaname <> $3 ORDER BY 1`, cfg.Publication, KeylessPublication(cfg.Publication), pg.ControlSchema)
	if err != nil {
		return nil, fmt.Errorf("list tables of publication %s: %w", cfg.Publication, err)
	}
	published, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list tables of publication %s: %w", cfg.Publication, err)
	}
	var out []string
	for _, t := range published {
		if !slices.ContainsFunc(cfg.Tables, func(c string) bool { return canonical(c) == t }) {
			out = append(out, t)
		}
	}
	return out, nil
}

// canonical spells a configured table as "schema.table".
func canonical(t string) string {
	if strings.Contains(t, ".") {
		return t
	}
	return "public." + t
}

func createSlot(ctx context.Context, db Querier, slot string) (uint64, error) {
	var lsn string
	err := db.QueryRow(ctx, `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')`, slot).Scan(&lsn)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "53400" {
			return 0, fmt.Errorf("create replication slot %s: %w (raise max_replication_slots in postgresql.conf and restart PostgreSQL)", slot, err)
		}
		return 0, fmt.Errorf("create replication slot %s: %w", slot, err)
	}
	confirmed, err := cdc.ParseLSN(lsn)
	if err != nil {
		return 0, fmt.Errorf("read position of slot %s: %w", slot, err)
	}
	return confirmed, nil
}
