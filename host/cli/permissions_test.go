package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/pgtest"
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
	dsn, admin := newSource(t)
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

// sourceObjects lists what walcast could create in a database: its
// publications, its slots, the walcast schema with its tables, and the
// pipelines recorded there, as one comparable string.
func sourceObjects(t *testing.T, db *pgx.Conn) string {
	t.Helper()
	ctx := context.Background()
	var list []string
	collect := func(sql string) {
		rows, err := db.Query(ctx, sql)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		list = append(list, got...)
	}
	collect(`SELECT 'publication ' || pubname FROM pg_publication ORDER BY 1`)
	collect(`SELECT 'slot ' || slot_name FROM pg_replication_slots WHERE database = current_database() ORDER BY 1`)
	collect(`SELECT 'schema ' || nspname || ' owned by ' || nspowner::regrole::text FROM pg_namespace WHERE nspname = 'walcast'`)
	collect(`SELECT 'table walcast.' || tablename FROM pg_tables WHERE schemaname = 'walcast' ORDER BY 1`)
	var schema bool
	db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'walcast')`).Scan(&schema)
	if schema {
		collect(`SELECT 'pipeline ' || pipeline FROM walcast.pipelines ORDER BY 1`)
		collect(`SELECT 'published ' || pipeline || ' ' || table_name FROM walcast.published_tables ORDER BY 1`)
		collect(`SELECT 'listed ' || pipeline || ' ' || table_name FROM walcast.backfill_tables ORDER BY 1`)
	}
	return strings.Join(list, "\n")
}

// TestFailedStartLeavesNothingBehind: roles and servers that cannot run a
// pipeline (no REPLICATION, not the table's owner, no CREATE on the
// database, wal_level = replica) make walcast run stop with exit 1 and
// one line naming the role, the object and the fix; and afterwards the
// source holds exactly what it held before: no publication, slot or
// walcast schema object of the failed start, and what existed (another
// pipeline's schema, slot, publication and rows) untouched.
func TestFailedStartLeavesNothingBehind(t *testing.T) {
	type setup struct {
		attrs        string // the role's attributes
		createOnDB   bool   // GRANT CREATE ON DATABASE
		ownsTable    bool
		otherRanHere bool // another pipeline (as postgres) created the walcast schema first
	}
	cases := []struct {
		name string
		setup
		want []string // in the last line; %[1]s is the role, %[2]s the table, %[3]s the database
	}{
		{"role without REPLICATION", setup{attrs: "", createOnDB: true, ownsTable: true},
			[]string{"role %[1]s lacks the REPLICATION attribute", "ALTER ROLE %[1]s REPLICATION"}},
		{"role not owning the table", setup{attrs: "REPLICATION", createOnDB: true},
			[]string{"role %[1]s does not own table public.%[2]s", "ALTER TABLE public.%[2]s OWNER TO %[1]s"}},
		{"role without CREATE on the database", setup{attrs: "REPLICATION", ownsTable: true},
			[]string{"role %[1]s may not create schema walcast", "GRANT CREATE ON DATABASE %[3]s TO %[1]s"}},
		{"role without REPLICATION where another pipeline runs", setup{attrs: "", createOnDB: true, ownsTable: true, otherRanHere: true},
			[]string{"role %[1]s lacks the REPLICATION attribute", "ALTER ROLE %[1]s REPLICATION"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dsn, admin := newSource(t)
			table := fmt.Sprintf("items_%d", i)
			exec1(t, admin, `CREATE TABLE `+table+` (id int PRIMARY KEY, v text)`)
			// Objects walcast did not make, which must stay as they are.
			exec1(t, admin, `CREATE TABLE unrelated (id int PRIMARY KEY); CREATE PUBLICATION unrelated FOR TABLE unrelated`)
			role := newRole(t, admin, dsn, "walcast_fail", c.attrs)
			if c.createOnDB {
				exec1(t, admin, fmt.Sprintf("GRANT CREATE ON DATABASE %s TO %s", pgx.Identifier{dbName(t, dsn)}.Sanitize(), role.Name))
			}
			if c.ownsTable {
				exec1(t, admin, fmt.Sprintf("ALTER TABLE %s OWNER TO %s", table, role.Name))
			}
			if c.otherRanHere {
				rcv := newReceiver(t)
				other := startWalcast(t, writePipeline(t, fmt.Sprintf("other_%d", i), dsn, []string{"public.unrelated"}, sinkSpec{ID: "hook", URL: rcv.URL}))
				other.waitLog(t, "streaming from slot")
				other.stop()
				exec1(t, admin, `GRANT USAGE ON SCHEMA walcast TO `+role.Name+`;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA walcast TO `+role.Name+`;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA walcast TO `+role.Name)
			}
			before := sourceObjects(t, admin)
			p := writePipeline(t, fmt.Sprintf("failing_%d", i), role.DSN, []string{"public." + table}, sinkSpec{ID: "hook", URL: "http://127.0.0.1:1/x"})
			out := runOnce(t, p)
			line := lastLine(out)
			for _, w := range c.want {
				wantAll(t, line, fmt.Sprintf(w, role.Name, table, dbName(t, dsn)))
			}
			if after := sourceObjects(t, admin); after != before {
				t.Errorf("the failed start changed the source:\nbefore:\n%s\nafter:\n%s\noutput:\n%s", before, after, out)
			}
		})
	}
	t.Run("wal_level replica", func(t *testing.T) {
		own := pgtest.New(t, pgtest.Options{Settings: []string{"wal_level = replica"}})
		admin := connect(t, own.DSN("postgres"))
		exec1(t, admin, `CREATE TABLE items (id int PRIMARY KEY)`)
		before := sourceObjects(t, admin)
		p := writePipeline(t, "replica_level", own.DSN("postgres"), []string{"public.items"}, sinkSpec{ID: "hook", URL: "http://127.0.0.1:1/x"})
		out := runOnce(t, p)
		wantAll(t, lastLine(out), `wal_level is "replica"`, "ALTER SYSTEM SET wal_level = logical", "restart PostgreSQL")
		if after := sourceObjects(t, admin); after != before {
			t.Errorf("the failed start changed the source:\nbefore:\n%s\nafter:\n%s\noutput:\n%s", before, after, out)
		}
	})
}

// docSQL returns the statements of the sql block of
// docs/roles-and-grants.md that contains marker.
func docSQL(t *testing.T, marker string) []string {
	t.Helper()
	for _, b := range docBlocks(t) {
		if b.file == "roles-and-grants.md" && b.lang == "sql" && strings.Contains(b.text, marker) {
			return sqlStatements(b.text)
		}
	}
	t.Fatalf("docs/roles-and-grants.md has no sql block with %q", marker)
	return nil
}

// secondRole follows docs/roles-and-grants.md: the
// one-role statements for walcast_shop, whose pipeline runs first and
// creates the walcast schema, then the statements for a second role,
// walcast_billing, run as they are (only the role and database names are
// this test's). It returns the admin connection and billing's DSN.
func secondRole(t *testing.T) (admin *pgx.Conn, billingDSN string) {
	t.Helper()
	dsn := cluster.Database(t)
	admin = connect(t, dsn)
	n := roleSeq.Add(1)
	shop := fmt.Sprintf("walcast_shop_%d_%d", os.Getpid(), n)
	billing := fmt.Sprintf("walcast_billing_%d_%d", os.Getpid(), n)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename IN ($1, $2)`, shop, billing)
		admin.Exec(ctx, "DROP OWNED BY "+shop+", "+billing)
		admin.Exec(ctx, "DROP ROLE "+billing)
		admin.Exec(ctx, "DROP ROLE "+shop)
	})
	exec1(t, admin, `CREATE TABLE public.orders (id serial PRIMARY KEY, customer text); CREATE TABLE public.invoices (id serial PRIMARY KEY, total numeric)`)
	run := func(stmts []string) {
		for _, s := range stmts {
			s = strings.ReplaceAll(s, "walcast_shop", shop)
			s = strings.ReplaceAll(s, "walcast_billing", billing)
			s = strings.ReplaceAll(s, "DATABASE shop", "DATABASE "+pgx.Identifier{dbName(t, dsn)}.Sanitize())
			exec1(t, admin, s)
		}
	}
	as := func(role string) string {
		u, _ := url.Parse(dsn)
		u.User = url.User(role)
		return u.String()
	}
	run(docSQL(t, "CREATE ROLE walcast_shop"))
	rcv := newReceiver(t)
	first := startWalcast(t, writePipeline(t, "grants_shop", as(shop), []string{"public.orders"}, sinkSpec{ID: "hook", URL: rcv.URL}))
	first.waitLog(t, "streaming from slot")
	first.stop()
	run(docSQL(t, "CREATE ROLE walcast_billing"))
	return admin, as(billing)
}

// TestDocumentedGrantsLetASecondRoleRun: a second role with exactly the
// grants docs/roles-and-grants.md gives it runs a pipeline in a database whose
// walcast schema another role created, and delivers its changes.
func TestDocumentedGrantsLetASecondRoleRun(t *testing.T) {
	admin, billing := secondRole(t)
	rcv := newReceiver(t)
	proc := startWalcast(t, writePipeline(t, "grants_billing", billing, []string{"public.invoices"}, sinkSpec{ID: "hook", URL: rcv.URL}))
	proc.waitLog(t, "streaming from slot")
	exec1(t, admin, `INSERT INTO public.invoices (total) VALUES (19.90)`)
	waitFor(t, "the invoice at the receiver", time.Minute, func() bool { return rcv.count() == 1 })
	if e := rcv.events()[0]; e.Table != "invoices" || e.Op != "insert" {
		t.Fatalf("received %+v, want the insert into invoices", e)
	}
	proc.stop()
}

// TestRevokedGrantStopsTheRun: a privilege revoked while walcast runs
// makes the next statement that needs it fail for good: parking an event
// (INSERT on walcast.parked), writing a checkpoint (UPDATE on
// walcast.checkpoints), the control listener's poll (SELECT on
// walcast.pauses). walcast run stops with exit 1 and one line naming the
// role, the table and the GRANT, instead of retrying forever.
func TestRevokedGrantStopsTheRun(t *testing.T) {
	for _, c := range []struct {
		name, revoke, table string
		fail                bool // the receiver refuses every event for good (413), so it is parked
	}{
		{"park", "INSERT ON walcast.parked", "walcast.parked", true},
		{"checkpoint", "INSERT, UPDATE ON walcast.checkpoints", "walcast.checkpoints", false},
		{"control listener", "SELECT ON walcast.pauses", "walcast.pauses", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			admin, billing := secondRole(t)
			rcv := newReceiver(t)
			if c.fail {
				// 413: permanent for the webhook sink, so the event is parked at once.
				rcv.setRespond(func(http.Header, []byte, []received) (int, http.Header) { return http.StatusRequestEntityTooLarge, nil })
			}
			proc := startWalcast(t, writePipeline(t, "grants_billing", billing, []string{"public.invoices"}, sinkSpec{ID: "hook", URL: rcv.URL}))
			proc.waitLog(t, "streaming from slot")
			role := pgconnUser(t, billing)
			exec1(t, admin, `REVOKE `+c.revoke+` FROM `+role)
			exec1(t, admin, `INSERT INTO public.invoices (total) VALUES (1)`)
			proc.waitExit1(t, 90*time.Second, c.revoke+" was revoked")
			out := proc.logText()
			wantAll(t, lastLine(out), "walcast run:", "role "+role, c.table, "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA walcast TO "+role)
			for _, l := range strings.Split(out, "\n") {
				// The final checkpoint at the stop is tried once more, and
				// may say so; nothing else may warn about it and go on.
				if strings.Contains(l, "level=WARN") && strings.Contains(l, "42501") && !strings.Contains(l, `msg="final checkpoint"`) {
					t.Errorf("the permission error was logged as one to retry: %s", l)
				}
			}
		})
	}
}

func pgconnUser(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return u.User.Username()
}

// TestLoginRefusalsSayWhatToDo: a wrong password (28P01) and a database
// that does not exist (3D000) end walcast run with exit 1 and one line
// that names what is wrong and what fixes it.
func TestLoginRefusalsSayWhatToDo(t *testing.T) {
	t.Run("wrong password", func(t *testing.T) {
		own := pgtest.New(t, pgtest.Options{})
		admin := connect(t, own.DSN("postgres"))
		exec1(t, admin, `CREATE TABLE items (id int PRIMARY KEY)`)
		exec1(t, admin, `SET password_encryption = 'scram-sha-256'; CREATE ROLE walcast_pw LOGIN REPLICATION PASSWORD 'right'`)
		// Password authentication for that role over TCP, trust for the rest.
		hba := filepath.Join(own.Data, "pg_hba.conf")
		old, err := os.ReadFile(hba)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(hba, append([]byte("host all walcast_pw 127.0.0.1/32 scram-sha-256\n"), old...), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := own.Command(context.Background(), "pg_ctl", "-D", own.Data, "reload").CombinedOutput(); err != nil {
			t.Fatalf("pg_ctl reload: %v\n%s", err, out)
		}
		dsn := fmt.Sprintf("postgres://walcast_pw:wrong@%s:%d/postgres?sslmode=disable", own.Host, own.Port)
		p := writePipeline(t, "pw", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: "http://127.0.0.1:1/x"})
		waitFor(t, "the reloaded pg_hba.conf to ask for a password", time.Minute, func() bool {
			_, err := pgx.Connect(context.Background(), dsn)
			return err != nil && strings.Contains(err.Error(), "28P01")
		})
		wantAll(t, lastLine(runOnce(t, p)), "role walcast_pw could not log in: wrong password", "correct the password in the dsn", "28P01")
	})
	t.Run("database missing", func(t *testing.T) {
		u, _ := url.Parse(cluster.DSN("postgres"))
		u.Path = "/no_such_db_for_walcast"
		p := writePipeline(t, "nodb", u.String(), []string{"public.items"}, sinkSpec{ID: "hook", URL: "http://127.0.0.1:1/x"})
		wantAll(t, lastLine(runOnce(t, p)), "database no_such_db_for_walcast does not exist", "create it or fix the database in the dsn")
	})
}
