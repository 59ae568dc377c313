package pg_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/host/internal/control/schema"
	. "github.com/walcast/walcast/host/internal/pg"
	"github.com/walcast/walcast/host/pgtest"
)

var cluster *pgtest.Cluster

func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }

// asRole returns the DSN of the test database for a fresh login role with
// attrs, dropped (with what it owns there) when the test ends.
func asRole(t *testing.T, admin *pgxpool.Pool, dsn, attrs string) (role, roleDSN string) {
	t.Helper()
	ctx := context.Background()
	role = fmt.Sprintf("pgerr_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN "+attrs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, role)
		admin.Exec(ctx, "DROP OWNED BY "+role)
		admin.Exec(ctx, "DROP ROLE "+role)
	})
	u, _ := url.Parse(dsn)
	u.User = url.User(role)
	return role, u.String()
}

// TestExplainRealRefusals: errors PostgreSQL really returns to a role
// lacking a privilege are permanent, and their explanation names the role,
// the object and the statement that fixes it.
func TestExplainRealRefusals(t *testing.T) {
	ctx := context.Background()
	dsn := cluster.Database(t)
	admin, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := schema.Migrate(ctx, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `CREATE TABLE owned_by_admin (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	role, roleDSN := asRole(t, admin, dsn, "")
	conn, err := pgx.Connect(ctx, roleDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	u, _ := url.Parse(dsn)
	db := strings.TrimPrefix(u.Path, "/")

	run := func(sql string) error {
		_, err := conn.Exec(ctx, sql)
		if err == nil {
			t.Fatalf("%s succeeded as role %s, want a refusal", sql, role)
		}
		return err
	}
	cases := []struct {
		name string
		err  func() error
		want []string
	}{
		{"schema walcast", func() error { return run(`SELECT * FROM walcast.checkpoints`) },
			[]string{"role " + role, "schema walcast", "GRANT USAGE ON SCHEMA walcast TO " + role, "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA walcast TO " + role}},
		{"table of walcast", func() error {
			admin.Exec(ctx, "GRANT USAGE ON SCHEMA walcast TO "+role)
			return run(`SELECT * FROM walcast.checkpoints`)
		}, []string{"role " + role, "table walcast.checkpoints", "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA walcast TO " + role}},
		{"captured table", func() error { return run(`SELECT * FROM owned_by_admin`) },
			[]string{"role " + role, "table owned_by_admin", "GRANT SELECT, UPDATE ON owned_by_admin TO " + role}},
		{"create in database", func() error { return run(`CREATE SCHEMA nope`) },
			[]string{"role " + role, "database " + db, "GRANT CREATE ON DATABASE " + db + " TO " + role}},
		{"table owner", func() error {
			admin.Exec(ctx, "GRANT CREATE ON DATABASE "+pgx.Identifier{db}.Sanitize()+" TO "+role)
			return run(`CREATE PUBLICATION p_` + role + ` FOR TABLE owned_by_admin`)
		}, []string{"role " + role, "does not own table owned_by_admin", "ALTER TABLE owned_by_admin OWNER TO " + role}},
		{"replication", func() error { return run(`SELECT pg_create_logical_replication_slot('s_` + role + `', 'pgoutput')`) },
			[]string{"role " + role, "REPLICATION attribute", "ALTER ROLE " + role + " REPLICATION"}},
		{"walsender", func() error {
			cfg, _ := pgconn.ParseConfig(roleDSN)
			cfg.RuntimeParams["replication"] = "database"
			c, err := pgconn.ConnectConfig(ctx, cfg)
			if err == nil {
				c.Close(ctx)
				t.Fatal("a replication connection without REPLICATION succeeded")
			}
			return err
		}, []string{"role " + role, "REPLICATION attribute", "ALTER ROLE " + role + " REPLICATION"}},
		{"database missing", func() error {
			u, _ := url.Parse(roleDSN)
			u.Path = "/no_such_database"
			_, err := pgx.Connect(ctx, u.String())
			return err
		}, []string{"database no_such_database does not exist", "fix the database in the dsn"}},
		{"role missing", func() error {
			u, _ := url.Parse(dsn)
			u.User = url.User("no_such_role")
			_, err := pgx.Connect(ctx, u.String())
			return err
		}, []string{"role no_such_role does not exist", "CREATE ROLE no_such_role"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.err()
			if !Permanent(err) {
				t.Fatalf("Permanent(%v) = false, want true", err)
			}
			got := Explain(fmt.Errorf("doing something: %w", err), role)
			var e *Error
			if !errors.As(got, &e) || !errors.Is(got, err) {
				t.Fatalf("Explain(%v) = %#v, want an *Error wrapping it", err, got)
			}
			msg := got.Error()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("explanation lacks %q:\n%s", w, msg)
				}
			}
			t.Log(msg)
			if strings.Contains(msg, "\n") {
				t.Errorf("explanation spans lines:\n%s", msg)
			}
			if again := Explain(got, "other"); again != got {
				t.Errorf("explaining twice changed it: %v", again)
			}
		})
	}
}

// TestTransientErrorsAreRetried: what goes away by itself is not
// permanent: a refused connection, the server ending the session, and the
// passing states PostgreSQL reports by code.
func TestTransientErrorsAreRetried(t *testing.T) {
	ctx := context.Background()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, refused := pgx.Connect(ctx, "postgres://postgres@"+addr+"/x?connect_timeout=3")
	if refused == nil || Permanent(refused) {
		t.Errorf("connection refused: Permanent(%v) = true, want false", refused)
	}

	dsn := cluster.Database(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, conn.PgConn().PID()); err != nil {
		t.Fatal(err)
	}
	_, terminated := conn.Exec(ctx, `SELECT 1`)
	if terminated == nil || Permanent(terminated) {
		t.Errorf("session terminated by an administrator: Permanent(%v) = true, want false", terminated)
	}
	for _, code := range []string{"57P01", "57P02", "57P03", "40001", "40P01", "53300", "53100", "55P03", "57014", "08006", "55006"} {
		if Permanent(fmt.Errorf("x: %w", &pgconn.PgError{Code: code, Message: "m"})) {
			t.Errorf("SQLSTATE %s is permanent, want retried", code)
		}
	}
	for _, code := range []string{"28P01", "28000", "42501", "42P01", "3D000", "3F000", "53400"} {
		if !Permanent(fmt.Errorf("x: %w", &pgconn.PgError{Code: code, Message: "m"})) {
			t.Errorf("SQLSTATE %s is retried, want permanent", code)
		}
	}
	if Permanent(context.Canceled) || Permanent(nil) || Explain(nil, "r") != nil {
		t.Error("a cancelled context or nil is permanent")
	}
}

// TestControlTablesAreWalcasts: the tables Explain recognises as walcast's
// are exactly those the migrations create.
func TestControlTablesAreWalcasts(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, cluster.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := schema.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'walcast' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	// PostgreSQL names the table without its schema.
	for _, table := range append(tables, "walcast_is_not_this") {
		err := Explain(&pgconn.PgError{Code: "42501", Message: "permission denied for table " + table}, "r")
		got := strings.Contains(err.Error(), "ON ALL TABLES IN SCHEMA walcast TO r")
		if want := slices.Contains(tables, table); got != want {
			t.Errorf("table %s: explained as a walcast table: %v, want %v (%v)", table, got, want, err)
		}
	}
}
