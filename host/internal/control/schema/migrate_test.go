package schema_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/control/checkpoints"
	"github.com/walcast/walcast/host/internal/control/lineage"
	"github.com/walcast/walcast/host/internal/control/pauses"
	"github.com/walcast/walcast/host/internal/control/schema"
	"github.com/walcast/walcast/host/internal/pg"
	"github.com/walcast/walcast/host/pgtest"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// legacyDDL is the control-plane schema exactly as walcast created it
// before the schema was versioned (ad hoc, at every start).
const legacyDDL = `
CREATE SCHEMA IF NOT EXISTS walcast;
CREATE TABLE IF NOT EXISTS walcast.pipelines (
	pipeline            text PRIMARY KEY,
	slot                text NOT NULL,
	publication         text NOT NULL,
	created_publication boolean NOT NULL DEFAULT false,
	created_at          timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS walcast.checkpoints (
	pipeline   text NOT NULL,
	sink       text NOT NULL,
	event_id   text NOT NULL,
	commit_lsn pg_lsn NOT NULL,
	idx        bigint NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (pipeline, sink)
);

CREATE TABLE IF NOT EXISTS walcast.parked (
	pipeline        text NOT NULL,
	sink            text NOT NULL,
	event_id        text NOT NULL,
	commit_lsn      pg_lsn NOT NULL,
	idx             bigint NOT NULL,
	row_key         text NOT NULL,
	schema_name     text NOT NULL,
	table_name      text NOT NULL,
	op              text NOT NULL,
	key             bytea NOT NULL,
	payload         bytea NOT NULL,
	attempts        int NOT NULL,
	last_error      text NOT NULL,
	first_failed_at timestamptz NOT NULL,
	last_failed_at  timestamptz NOT NULL,
	PRIMARY KEY (pipeline, sink, commit_lsn, idx)
);
CREATE INDEX IF NOT EXISTS parked_row ON walcast.parked (pipeline, sink, row_key, commit_lsn, idx);
CREATE TABLE IF NOT EXISTS walcast.replay_requests (
	id           bigserial PRIMARY KEY,
	pipeline     text NOT NULL,
	sink         text NOT NULL,
	event_id     text,
	requested_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS walcast.usage (
	pipeline  text NOT NULL,
	sink      text NOT NULL,
	hour      timestamptz NOT NULL,
	attempts  bigint NOT NULL DEFAULT 0,
	delivered bigint NOT NULL DEFAULT 0,
	failed    bigint NOT NULL DEFAULT 0,
	bytes     bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (pipeline, sink, hour)
);

CREATE TABLE IF NOT EXISTS walcast.pauses (
	pipeline text NOT NULL,
	sink     text NOT NULL,
	since    timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (pipeline, sink)
);
`

var cluster *pgtest.Cluster

func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }

// migrated returns a pool on a database of its own with the walcast
// schema migrated (closed when the test ends).
func migrated(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), cluster.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := schema.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

func TestMigrateUpgradesTheUnversionedSchema(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cluster.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, legacyDDL); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
INSERT INTO walcast.pipelines (pipeline, slot, publication, created_publication) VALUES ('shop', 'walcast_shop', 'walcast_shop', true);
INSERT INTO walcast.checkpoints (pipeline, sink, event_id, commit_lsn, idx) VALUES ('shop', 'hook', '0/1A2B:3', '0/1A2B', 3);
INSERT INTO walcast.pauses (pipeline, sink) VALUES ('shop', 'hook')`); err != nil {
		t.Fatal(err)
	}
	s := lineage.New(pool, "shop")
	// Two starts at once: the advisory lock applies each step once.
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- schema.Migrate(ctx, pool) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	var versions []int
	rows, err := pool.Query(ctx, `SELECT version FROM walcast.schema_version ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		versions = append(versions, v)
	}
	if len(versions) != schema.Version() || versions[len(versions)-1] != schema.Version() {
		t.Fatalf("schema versions recorded: %v, want 1..%d once each", versions, schema.Version())
	}
	marks, err := checkpoints.New(pool, "shop").Load(ctx)
	if err != nil || marks["hook"] != cdc.MustParseEventID("0/1A2B:3") {
		t.Fatalf("checkpoints after upgrade: %v, %v", marks, err)
	}
	p, ok, err := s.LoadPipeline(ctx)
	if err != nil || !ok || p.Slot != "walcast_shop" || !p.CreatedPublication || p.Identity != (lineage.Identity{}) {
		t.Fatalf("pipeline after upgrade: %+v %v %v", p, ok, err)
	}
	pauses, err := pauses.New(pool, "shop").LoadPauses(ctx)
	if _, paused := pauses.Paused("hook"); err != nil || !paused {
		t.Fatalf("pause after upgrade: %+v %v", pauses, err)
	}
	id := lineage.Identity{SystemIdentifier: "7301", DatabaseOID: 16384, SlotCreatedLSN: 0x1A00}
	if err := s.SetIdentity(ctx, id); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := s.LoadPipeline(ctx); p.Identity != id {
		t.Fatalf("identity = %+v, want %+v", p.Identity, id)
	}
}

func TestMigrateRefusesANewerSchema(t *testing.T) {
	ctx := context.Background()
	pool := migrated(t)
	next := schema.Version() + 1
	if _, err := pool.Exec(ctx, `INSERT INTO walcast.schema_version (version, name) VALUES ($1, 'from the future')`, next); err != nil {
		t.Fatal(err)
	}
	err := schema.Migrate(ctx, pool)
	if !errors.Is(err, schema.ErrTooNew) {
		t.Fatalf("Migrate on a newer schema = %v, want ErrTooNew", err)
	}
	for _, want := range []string{"at version " + strconv.Itoa(next), "knows versions up to " + strconv.Itoa(schema.Version())} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestMigrateWithTheGrantsOfASecondRole: a role granted only the use of
// the walcast tables another role created (docs/operations.md, "Roles and
// grants") passes Migrate when the schema is current, and writes its
// checkpoints; when the schema needs a step, it is told which role can
// migrate it, as a permanent error.
func TestMigrateWithTheGrantsOfASecondRole(t *testing.T) {
	ctx := context.Background()
	dsn := cluster.Database(t)
	admin, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	role := "migrate_second_" + strconv.Itoa(os.Getpid())
	if _, err := admin.Exec(ctx, "DROP ROLE IF EXISTS "+role+"; CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.Exec(ctx, "DROP OWNED BY "+role)
		admin.Exec(ctx, "DROP ROLE "+role)
	})
	if err := schema.Migrate(ctx, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `
GRANT USAGE ON SCHEMA walcast TO `+role+`;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA walcast TO `+role+`;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA walcast TO `+role); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(dsn)
	u.User = url.User(role)
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := checkpoints.New(pool, "second")
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate as a role with the documented grants on a current schema: %v", err)
	}
	if err := s.Save(ctx, map[string]cdc.EventID{"hook": cdc.MustParseEventID("0/1A2B:3")}); err != nil {
		t.Fatalf("save checkpoints as the second role: %v", err)
	}

	// One step behind: only the tables' owner may migrate.
	if _, err := admin.Exec(ctx, `DELETE FROM walcast.schema_version WHERE version = $1`, schema.Version()); err != nil {
		t.Fatal(err)
	}
	err = schema.Migrate(ctx, pool)
	var perm *pg.Error
	if !errors.As(err, &perm) || !pg.Permanent(err) {
		t.Fatalf("Migrate as the second role on a schema one step behind = %v, want a permanent *pg.Error", err)
	}
	for _, want := range []string{"role postgres", "role " + role, "start this walcast once as role postgres"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if err := schema.Migrate(ctx, admin); err != nil {
		t.Fatalf("the owner migrates: %v", err)
	}
}

// TestDropUnusedKeepsASchemaAnotherPipelineUses: the walcast schema a
// failed start created is dropped when it holds only that pipeline's rows,
// and kept as soon as another pipeline wrote anything in it.
func TestDropUnusedKeepsASchemaAnotherPipelineUses(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cluster.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	exists := func() (ok bool) {
		pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'walcast')`).Scan(&ok)
		return ok
	}
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO walcast.backfill_tables VALUES ('mine', 'public.t')`); err != nil {
		t.Fatal(err)
	}
	if dropped, err := schema.DropUnused(ctx, pool, "mine"); err != nil || !dropped || exists() {
		t.Fatalf("DropUnused of a schema holding only the pipeline's rows = %v, %v; schema left: %v", dropped, err, exists())
	}
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := checkpoints.New(pool, "other").Save(ctx, map[string]cdc.EventID{"hook": cdc.MustParseEventID("0/1:0")}); err != nil {
		t.Fatal(err)
	}
	if dropped, err := schema.DropUnused(ctx, pool, "mine"); err != nil || dropped || !exists() {
		t.Fatalf("DropUnused of a schema another pipeline wrote to = %v, %v; schema left: %v", dropped, err, exists())
	}
}
