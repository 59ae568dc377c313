package capture

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walcast/walcast/host/checkpoint"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Querier is the part of pgx setup needs (*pgxpool.Pool, *pgx.Conn).
type Querier = checkpoint.Querier

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
	// WalSenderTimeout is the server's wal_sender_timeout; status updates
	// must be sent well within it.
	WalSenderTimeout time.Duration
	// AcceptedGap is the gap Prepare accepted (Config.AcceptGap), if any.
	AcceptedGap *GapError
}

// Prepare checks that the source can be captured and creates the
// publication and the slot when they are missing. The publication is
// created before the slot: a slot only decodes with publications that
// existed at its starting point.
func Prepare(ctx context.Context, db Querier, store *checkpoint.Store, cfg Config) (Prepared, error) {
	var p Prepared
	var level string
	if err := db.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return p, fmt.Errorf("read wal_level: %w", err)
	}
	if level != "logical" {
		return p, fmt.Errorf("wal_level is %q but logical decoding needs \"logical\": run ALTER SYSTEM SET wal_level = logical (or set it in postgresql.conf) and restart PostgreSQL", level)
	}
	var timeoutMS int64
	if err := db.QueryRow(ctx, "SELECT setting::bigint FROM pg_settings WHERE name = 'wal_sender_timeout'").Scan(&timeoutMS); err != nil {
		return p, fmt.Errorf("read wal_sender_timeout: %w", err)
	}
	p.WalSenderTimeout = time.Duration(timeoutMS) * time.Millisecond
	keyless, err := checkTables(ctx, db, cfg.Tables)
	if err != nil {
		return p, err
	}
	if len(keyless) > 0 && !cfg.AllowKeyless {
		t := keyless[0]
		return p, fmt.Errorf("table %s has no primary key and no replica identity, so its updates and deletes cannot be identified: add a primary key, or run ALTER TABLE %s REPLICA IDENTITY FULL (or set allow_keyless = true in the source block to deliver its changes with key null)", t, t)
	}
	p.Keyless = keyless
	if err := store.Init(ctx); err != nil {
		return p, err
	}
	st, err := inspect(ctx, db, store, cfg)
	if err != nil {
		return p, err
	}
	rec, known, here, slot := st.rec, st.known, st.here, st.slot
	gap := st.gap
	if gap != nil {
		if !cfg.AcceptGap {
			return p, gap
		}
		if slot.exists {
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
	created, err := ensurePublication(ctx, db, cfg, ours)
	if err != nil {
		return p, err
	}
	p.CreatedPublication = created
	if err := store.RecordPipeline(ctx, checkpoint.Pipeline{Slot: cfg.Slot, Publication: cfg.Publication, CreatedPublication: created || ours}); err != nil {
		return p, err
	}
	if slot.exists {
		if err := slot.usable(cfg.Slot); err != nil {
			return p, err
		}
		p.ConfirmedFlush = slot.confirmed
	} else {
		if p.ConfirmedFlush, err = createSlot(ctx, db, cfg.Slot); err != nil {
			return p, err
		}
		p.CreatedSlot = true
	}
	id := here
	id.SlotCreatedLSN = rec.Identity.SlotCreatedLSN
	if p.CreatedSlot || id.SlotCreatedLSN == 0 {
		// A new incarnation, or (set up by an older walcast) the slot
		// adopted where it stands.
		id.SlotCreatedLSN = p.ConfirmedFlush
	}
	switch {
	case gap != nil:
		if err := store.AcceptGap(ctx, gap.Reason(), cfg.Sinks, p.ConfirmedFlush, id); err != nil {
			return p, err
		}
		p.AcceptedGap = gap
	case id != rec.Identity:
		if err := store.SetIdentity(ctx, id); err != nil {
			return p, err
		}
	}
	return p, nil
}

// state is what Prepare and Diagnose read before changing anything.
type state struct {
	rec   checkpoint.Pipeline
	known bool
	here  checkpoint.Identity
	slot  slotInfo
	gap   *GapError
}

func inspect(ctx context.Context, db Querier, store *checkpoint.Store, cfg Config) (state, error) {
	var st state
	var err error
	if st.rec, st.known, err = store.LoadPipeline(ctx); err != nil {
		return st, err
	}
	if st.here, err = clusterIdentity(ctx, db, cfg.DSN); err != nil {
		return st, err
	}
	if st.slot, err = lookupSlot(ctx, db, cfg.Slot); err != nil {
		return st, err
	}
	marks, err := store.Load(ctx)
	if err != nil {
		return st, err
	}
	var pubExists bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, cfg.Publication).Scan(&pubExists); err != nil {
		return st, fmt.Errorf("look up publication %s: %w", cfg.Publication, err)
	}
	st.gap = checkHistory(cfg, store.Pipeline(), st.rec, st.known, st.here, st.slot, marks, pubExists)
	return st, nil
}

// Diagnose reports, without changing anything, why walcast run would
// refuse to stream from the pipeline's slot (nil when it would not). The
// walcast schema must be initialised.
func Diagnose(ctx context.Context, db Querier, store *checkpoint.Store, cfg Config) (*GapError, error) {
	st, err := inspect(ctx, db, store, cfg)
	return st.gap, err
}

// GapError is Prepare's refusal to stream when changes may have been lost
// under walcast: the slot is gone, invalidated or from another cluster, or
// its publication was dropped. It says what happened and the ways out.
type GapError struct {
	Slot, Publication string
	// Kind is "slot lost", "foreign checkpoints", "slot invalidated" or
	// "publication dropped".
	Kind string
	// What explains the case; Checkpoints lists the sinks' last
	// checkpoints; Restore is the way out other than accepting the gap.
	What, Checkpoints, Restore, Replace string
}

func (e *GapError) Error() string {
	return fmt.Sprintf("%s; last checkpoints: %s. walcast does not continue silently over lost changes. Either %s, or accept the gap: run walcast run PIPELINE.hcl --accept-gap once (library: StreamConfig.AcceptGap), which %s and records the gap from each sink's checkpoint to the new slot's start in walcast.gaps (shown by walcast status)",
		e.What, e.Checkpoints, e.Restore, e.Replace)
}

// Reason is the short reason stored with an accepted gap.
func (e *GapError) Reason() string { return e.Kind }

// checkHistory compares what the walcast schema remembers of the pipeline
// with the slot as it is now, and returns why streaming would hide lost
// changes, or nil.
func checkHistory(cfg Config, pipeline string, rec checkpoint.Pipeline, known bool, here checkpoint.Identity, slot slotInfo, marks map[string]cdc.EventID, pubExists bool) *GapError {
	// The pipeline has streamed before when it has checkpoints or walcast
	// recorded a slot for it.
	streamed := len(marks) > 0 || (known && rec.Identity.SlotCreatedLSN != 0)
	if !streamed {
		return nil
	}
	cps := "none"
	if len(marks) > 0 {
		names := make([]string, 0, len(marks))
		for s := range marks {
			names = append(names, s)
		}
		sort.Strings(names)
		parts := make([]string, len(names))
		for i, s := range names {
			parts[i] = s + " " + marks[s].String()
		}
		cps = strings.Join(parts, ", ")
	}
	e := &GapError{Slot: cfg.Slot, Publication: cfg.Publication, Checkpoints: cps}
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
func clusterIdentity(ctx context.Context, db Querier, dsn string) (checkpoint.Identity, error) {
	var id checkpoint.Identity
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

func identifySystem(ctx context.Context, dsn string) (string, error) {
	pcfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "", err
	}
	pcfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, pcfg)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	res, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return "", err
	}
	return res.SystemID, nil
}

// DropCreatedSlot drops the slot a start created before it failed, so
// that a failed start does not leave a slot retaining WAL, and forgets its
// incarnation: nothing was streamed from it.
func DropCreatedSlot(ctx context.Context, db Querier, store *checkpoint.Store, slot string) error {
	if _, err := db.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, slot); err != nil {
		return fmt.Errorf("drop replication slot %s created by the failed start: %w", slot, err)
	}
	return store.ForgetSlot(ctx)
}

// checkTables verifies each table exists and returns the ones without a
// usable replica identity.
func checkTables(ctx context.Context, db Querier, tables []string) (keyless []string, err error) {
	for _, t := range tables {
		schema, name, ok := strings.Cut(t, ".")
		if !ok {
			schema, name = "public", t
		}
		if schema == checkpoint.Schema {
			return nil, fmt.Errorf("table %s is in the walcast schema, which is never captured", t)
		}
		var ident string
		var hasPK bool
		err := db.QueryRow(ctx, `
SELECT c.relreplident::text,
       EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`, schema, name).Scan(&ident, &hasPK)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("table %s does not exist in the source database: create it or remove it from the source tables", t)
		}
		if err != nil {
			return nil, fmt.Errorf("inspect table %s: %w", t, err)
		}
		if ident == "n" || (ident == "d" && !hasPK) {
			keyless = append(keyless, schema+"."+name)
		}
	}
	return keyless, nil
}

func qualified(t string) string {
	schema, name, ok := strings.Cut(t, ".")
	if !ok {
		schema, name = "public", t
	}
	return pgx.Identifier{schema, name}.Sanitize()
}

func ensurePublication(ctx context.Context, db Querier, cfg Config, ours bool) (created bool, err error) {
	var exists bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, cfg.Publication).Scan(&exists); err != nil {
		return false, fmt.Errorf("look up publication %s: %w", cfg.Publication, err)
	}
	list := make([]string, len(cfg.Tables))
	for i, t := range cfg.Tables {
		list[i] = qualified(t)
	}
	pub := pgx.Identifier{cfg.Publication}.Sanitize()
	switch {
	case !exists:
		if _, err := db.Exec(ctx, "CREATE PUBLICATION "+pub+" FOR TABLE "+strings.Join(list, ", ")); err != nil {
			return false, fmt.Errorf("create publication %s: %w", cfg.Publication, err)
		}
		return true, nil
	case ours:
		// walcast made it: keep it in step with the pipeline's table list.
		if _, err := db.Exec(ctx, "ALTER PUBLICATION "+pub+" SET TABLE "+strings.Join(list, ", ")); err != nil {
			return false, fmt.Errorf("update tables of publication %s: %w", cfg.Publication, err)
		}
		return false, nil
	}
	// Someone else's publication: use it as it is, but refuse to start
	// when it does not publish a configured table (its changes would
	// silently never arrive).
	for _, t := range cfg.Tables {
		schema, name, ok := strings.Cut(t, ".")
		if !ok {
			schema, name = "public", t
		}
		var in bool
		err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)`,
			cfg.Publication, schema, name).Scan(&in)
		if err != nil {
			return false, fmt.Errorf("inspect publication %s: %w", cfg.Publication, err)
		}
		if !in {
			return false, fmt.Errorf("publication %s exists but does not publish %s.%s: run ALTER PUBLICATION %s ADD TABLE %s, or name another publication in the source block", cfg.Publication, schema, name, pub, qualified(t))
		}
	}
	return false, nil
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

// Teardown drops the slot and, when walcast created it, the publication.
// Undelivered changes in the slot are gone afterwards.
func Teardown(ctx context.Context, db Querier, store *checkpoint.Store, slot, publication string) error {
	rec, known, err := store.LoadPipeline(ctx)
	if err != nil {
		return err
	}
	var active *int32
	err = db.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("look up replication slot %s: %w", slot, err)
	case active != nil:
		return fmt.Errorf("replication slot %s is in use by process %d: stop `walcast run` for this pipeline first", slot, *active)
	default:
		if _, err := db.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot); err != nil {
			return fmt.Errorf("drop replication slot %s: %w", slot, err)
		}
	}
	if known && rec.CreatedPublication {
		if _, err := db.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{rec.Publication}.Sanitize()); err != nil {
			return fmt.Errorf("drop publication %s: %w", rec.Publication, err)
		}
	}
	return store.Forget(ctx)
}
