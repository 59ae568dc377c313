package cli

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Tests of what walcast run does with roles that lack a privilege: it
// stops with exit 1 and one line naming the role, the object and the fix
// (never a retry loop), and a start that fails leaves nothing behind.

var roleSeq atomic.Int64

// pgRole is a login role made for one test in the shared cluster.
type pgRole struct {
	Name string
	DSN  string // the test database, as this role
}

// newRole creates a login role with attrs (e.g. "REPLICATION") and drops
// it, with everything it owns in the test's database, when the test ends
// (after walcast stopped: cleanups run in reverse).
func newRole(t *testing.T, admin *pgx.Conn, dsn, prefix, attrs string) pgRole {
	t.Helper()
	name := fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), roleSeq.Add(1))
	exec1(t, admin, fmt.Sprintf("CREATE ROLE %s LOGIN %s", name, attrs))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Sessions of the role (a walcast killed mid-start) must be gone.
		admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, name)
		admin.Exec(ctx, "DROP OWNED BY "+name)
		admin.Exec(ctx, "DROP ROLE "+name)
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(name)
	return pgRole{Name: name, DSN: u.String()}
}

// dbName is the database a DSN names.
func dbName(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// lastLine is the last non-empty line of out: what walcast run prints as
// its error before exiting.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	return lines[len(lines)-1]
}

// TestSecondRoleWithoutGrantsStopsWithTheGrant: role A ran a pipeline
// first, so the walcast schema is A's. Role B runs another pipeline in the
// same database without being granted anything on it. walcast run must
// stop with exit 1 and one line that names B, the schema and the GRANTs,
// instead of retrying "cannot reach the source database" forever, and B's
// failed start must leave A's objects as they were.
func TestSecondRoleWithoutGrantsStopsWithTheGrant(t *testing.T) {
	dsn := cluster.Database(t)
	admin := connect(t, dsn)
	db := pgx.Identifier{dbName(t, dsn)}.Sanitize()
	a := newRole(t, admin, dsn, "walcast_a", "REPLICATION")
	b := newRole(t, admin, dsn, "walcast_b", "REPLICATION")
	for _, r := range []pgRole{a, b} {
		exec1(t, admin, fmt.Sprintf("GRANT CREATE ON DATABASE %s TO %s", db, r.Name))
	}
	exec1(t, admin, `CREATE TABLE a_items (id int PRIMARY KEY); CREATE TABLE b_items (id int PRIMARY KEY)`)
	exec1(t, admin, fmt.Sprintf("ALTER TABLE a_items OWNER TO %s; ALTER TABLE b_items OWNER TO %s", a.Name, b.Name))
	rcv := newReceiver(t)

	first := startWalcast(t, writePipeline(t, "perm_a", a.DSN, []string{"public.a_items"}, sinkSpec{ID: "hook", URL: rcv.URL}))
	first.waitLog(t, "streaming from slot")
	first.stop()

	second := startWalcast(t, writePipeline(t, "perm_b", b.DSN, []string{"public.b_items"}, sinkSpec{ID: "hook", URL: rcv.URL}))
	second.waitExit1(t, 90*time.Second, "role "+b.Name+" was denied the walcast schema")
	out := second.logText()
	line := lastLine(out)
	wantAll(t, line, "walcast run:", b.Name, "schema walcast", "GRANT USAGE ON SCHEMA walcast TO "+b.Name)
	if strings.Contains(out, "cannot reach the source database") {
		t.Errorf("a permission error was reported as an unreachable database:\n%s", out)
	}
	// B created nothing, and A's pipeline is as A left it.
	var slots, pubs int
	admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'walcast_perm_b'`).Scan(&slots)
	admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_publication WHERE pubname LIKE 'walcast_perm_b%'`).Scan(&pubs)
	if slots != 0 || pubs != 0 {
		t.Errorf("the failed start of role %s left %d slots and %d publications", b.Name, slots, pubs)
	}
	var owner string
	var pipelines []string
	admin.QueryRow(context.Background(), `SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'walcast'`).Scan(&owner)
	rows, _ := admin.Query(context.Background(), `SELECT pipeline FROM walcast.pipelines ORDER BY 1`)
	pipelines, _ = pgx.CollectRows(rows, pgx.RowTo[string])
	if owner != a.Name || strings.Join(pipelines, ",") != "perm_a" {
		t.Errorf("after the failed start the walcast schema is owned by %q with pipelines %v; want %s's, with perm_a only", owner, pipelines, a.Name)
	}
}
