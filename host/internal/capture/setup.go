package capture

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	created, kpub, err := ensurePublication(ctx, db, cfg, ours, keyless)
	if err != nil {
		return p, err
	}
	p.CreatedPublication = created
	p.KeylessPublication = kpub
	if p.Unlisted, err = unlistedTables(ctx, db, cfg); err != nil {
		return p, err
	}
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
func ensurePublication(ctx context.Context, db Querier, cfg Config, ours bool, keyless []string) (created bool, keylessPub string, err error) {
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
		if err := createPublication(ctx, db, cfg.Publication, keyed, publicationOptions); err != nil {
			return false, "", err
		}
		if err := createPublication(ctx, db, kpub, unkeyed, keylessPublicationOptions); err != nil {
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
			// on (see the README).
			return false, kpub, createPublication(ctx, db, kpub, unkeyed, keylessPublicationOptions)
		}
	}
	// Someone else's publication: use it as it is, but refuse to start
	// when it does not publish a configured table (its changes would
	// silently never arrive), or publishes a partitioned one under its
	// partitions' names (a sink filtering on the listed name would get
	// none of them).
	var viaRoot bool
	if err := db.QueryRow(ctx, `SELECT pubviaroot FROM pg_publication WHERE pubname = $1`, cfg.Publication).Scan(&viaRoot); err != nil {
		return false, "", fmt.Errorf("inspect publication %s: %w", cfg.Publication, err)
	}
	for _, t := range cfg.Tables {
		schema, name, _ := strings.Cut(canonical(t), ".")
		var partitioned bool
		err := db.QueryRow(ctx, `SELECT c.relkind = 'p' FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2`,
			schema, name).Scan(&partitioned)
		if err != nil {
			return false, "", fmt.Errorf("inspect table %s: %w", t, err)
		}
		if partitioned && !viaRoot {
			return false, "", fmt.Errorf("publication %s publishes the partitioned table %s under the names of its partitions (publish_via_partition_root is off), so its events would not carry the name %s: run ALTER PUBLICATION %s SET (publish_via_partition_root = true), or leave the publication out of the source block so that walcast creates its own",
				cfg.Publication, t, t, pub)
		}
	}
	for _, t := range cfg.Tables {
		schema, name, ok := strings.Cut(t, ".")
		if !ok {
			schema, name = "public", t
		}
		var in bool
		err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)`,
			cfg.Publication, schema, name).Scan(&in)
		if err != nil {
			return false, "", fmt.Errorf("inspect publication %s: %w", cfg.Publication, err)
		}
		if !in {
			return false, "", fmt.Errorf("publication %s exists but does not publish %s.%s: run ALTER PUBLICATION %s ADD TABLE %s, or name another publication in the source block", cfg.Publication, schema, name, pub, qualified(t))
		}
	}
	return false, "", nil
}

// createPublication creates a publication of tables (possibly none).
func createPublication(ctx context.Context, db Querier, name string, tables []string, options string) error {
	sql := "CREATE PUBLICATION " + pgx.Identifier{name}.Sanitize()
	if len(tables) > 0 {
		sql += " FOR TABLE " + strings.Join(tables, ", ")
	}
	if _, err := db.Exec(ctx, sql+options); err != nil {
		return fmt.Errorf("create publication %s: %w", name, err)
	}
	return nil
}

// setPublicationTables makes tables (possibly none) the tables of a
// publication.
func setPublicationTables(ctx context.Context, db Querier, name string, tables []string) error {
	pub := pgx.Identifier{name}.Sanitize()
	if len(tables) > 0 {
		if _, err := db.Exec(ctx, "ALTER PUBLICATION "+pub+" SET TABLE "+strings.Join(tables, ", ")); err != nil {
			return fmt.Errorf("update tables of publication %s: %w", name, err)
		}
		return nil
	}
	// SET TABLE needs at least one table: drop the members one by one.
	rows, err := db.Query(ctx, `
SELECT format('%I.%I', n.nspname, c.relname)
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
	for _, m := range members {
		if _, err := db.Exec(ctx, "ALTER PUBLICATION "+pub+" DROP TABLE "+m); err != nil {
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
WHERE pubname IN ($1, $2) AND schemaname <> $3 ORDER BY 1`, cfg.Publication, KeylessPublication(cfg.Publication), checkpoint.Schema)
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
		for _, pub := range []string{rec.Publication, KeylessPublication(rec.Publication)} {
			if _, err := db.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{pub}.Sanitize()); err != nil {
				return fmt.Errorf("drop publication %s: %w", pub, err)
			}
		}
	}
	return store.Forget(ctx)
}
