package capture

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walcast/walcast/host/internal/checkpoint"
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
	rec, known, err := store.LoadPipeline(ctx)
	if err != nil {
		return p, err
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
	p.ConfirmedFlush, p.CreatedSlot, err = ensureSlot(ctx, db, cfg.Slot)
	return p, err
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

func ensureSlot(ctx context.Context, db Querier, slot string) (confirmed uint64, created bool, err error) {
	var plugin, lsn string
	var sameDB bool
	err = db.QueryRow(ctx, `
SELECT coalesce(plugin, ''), coalesce(confirmed_flush_lsn::text, ''), database = current_database()
FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&plugin, &lsn, &sameDB)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		err = db.QueryRow(ctx, `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')`, slot).Scan(&lsn)
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "53400" {
				return 0, false, fmt.Errorf("create replication slot %s: %w (raise max_replication_slots in postgresql.conf and restart PostgreSQL)", slot, err)
			}
			return 0, false, fmt.Errorf("create replication slot %s: %w", slot, err)
		}
		created = true
	case err != nil:
		return 0, false, fmt.Errorf("look up replication slot %s: %w", slot, err)
	case plugin != "pgoutput":
		return 0, false, fmt.Errorf("replication slot %s exists but uses output plugin %q, not pgoutput: choose another slot name", slot, plugin)
	case !sameDB:
		return 0, false, fmt.Errorf("replication slot %s belongs to another database: choose another slot name", slot)
	}
	confirmed, err = cdc.ParseLSN(lsn)
	if err != nil {
		return 0, false, fmt.Errorf("read position of slot %s: %w", slot, err)
	}
	return confirmed, created, nil
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
