package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/control/schema"
	"github.com/walcast/walcast/host/pgtest"
)

// Tests of walcast validate --source, the plan of a start: against a real
// PostgreSQL, each reason walcast run refuses is named on its object's
// line, the command exits 1, and the source holds exactly what it held
// before (pg_replication_slots, pg_publication, pg_namespace and the
// walcast schema's tables: sourceObjects). A clean plan exits 0, and
// walcast run then starts and creates what the plan said it would.

// runPlan runs walcast validate --source on pipeline and returns its
// stdout, stderr and exit status.
func runPlan(t *testing.T, pipeline string) (string, string, int) {
	t.Helper()
	return walcastTimed(t, 2*time.Minute, nil, "validate", "--source", pipeline, "--plugin-dir", binDir)
}

// planLines are the plan's lines marked mark ("!", "+", "~", "ok").
func planLines(out, mark string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == mark && strings.HasPrefix(l, "  ") {
			lines = append(lines, strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), mark)))
		}
	}
	return lines
}

// wantRefused fails unless the plan exited 1, says walcast run would
// refuse, and has a "!" line starting with prefix and containing each of
// parts.
func wantRefused(t *testing.T, out string, code int, prefix string, parts ...string) {
	t.Helper()
	if code != 1 || !strings.Contains(out, "walcast run would refuse to start pipeline") {
		t.Fatalf("validate --source: exit %d, want 1 and the refusal; output:\n%s", code, out)
	}
	for _, l := range planLines(out, "!") {
		if strings.HasPrefix(l, prefix) {
			wantAll(t, l, parts...)
			return
		}
	}
	t.Fatalf("no refused line for %q in the plan:\n%s", prefix, out)
}

// TestPlanRefusals: each case the issue lists, on a fresh database: the
// plan names the reason on its object's line, exits 1 and creates
// nothing.
func TestPlanRefusals(t *testing.T) {
	cases := []struct {
		name   string
		tables []string
		setup  func(t *testing.T, admin *pgx.Conn, dsn string) string // returns the pipeline's dsn
		sink   sinkSpec
		prefix string
		want   []string
	}{
		{name: "missing table", tables: []string{"public.items", "public.nope"},
			prefix: "table public.nope", want: []string{"does not exist in the source database", "create it or remove it from the source tables"}},
		{name: "keyless table", tables: []string{"public.items", "public.bare"},
			prefix: "table public.bare", want: []string{"none", "has no primary key and no replica identity", "REPLICA IDENTITY FULL", "allow_keyless = true"}},
		{name: "role without REPLICATION", tables: []string{"public.items"},
			setup: func(t *testing.T, admin *pgx.Conn, dsn string) string {
				r := newRole(t, admin, dsn, "walcast_plan", "")
				exec1(t, admin, fmt.Sprintf("GRANT CREATE ON DATABASE %s TO %s; ALTER TABLE items OWNER TO %s", pgx.Identifier{dbName(t, dsn)}.Sanitize(), r.Name, r.Name))
				return r.DSN
			},
			prefix: "role walcast_plan_", want: []string{"no REPLICATION", "lacks the REPLICATION attribute", "ALTER ROLE walcast_plan_"}},
		{name: "schema of another role", tables: []string{"public.items"},
			setup: func(t *testing.T, admin *pgx.Conn, dsn string) string {
				owner := newRole(t, admin, dsn, "walcast_owner", "REPLICATION")
				exec1(t, admin, fmt.Sprintf("GRANT CREATE ON DATABASE %s TO %s", pgx.Identifier{dbName(t, dsn)}.Sanitize(), owner.Name))
				migrateAs(t, owner.DSN)
				r := newRole(t, admin, dsn, "walcast_plan", "REPLICATION")
				exec1(t, admin, fmt.Sprintf("GRANT CREATE ON DATABASE %s TO %s; ALTER TABLE items OWNER TO %s", pgx.Identifier{dbName(t, dsn)}.Sanitize(), r.Name, r.Name))
				return r.DSN
			},
			prefix: "schema walcast", want: []string{"owned by role walcast_owner_", "may not use schema walcast", "GRANT USAGE ON SCHEMA walcast TO walcast_plan_"}},
		{name: "missing plugin", tables: []string{"public.items"}, sink: sinkSpec{ID: "events", SinkType: "nosuch", Config: "    url = \"http://127.0.0.1:1/\"\n"},
			prefix: "sink events (nosuch)", want: []string{"Unavailable sink plugin", "no executable walcast-sink-nosuch"}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dsn, admin := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, body text)`, `CREATE TABLE bare (v int)`)
			if c.setup != nil {
				dsn = c.setup(t, admin, dsn)
			}
			sink := c.sink
			if sink.ID == "" {
				sink = sinkSpec{ID: "hook", URL: "http://127.0.0.1:1/hook"}
			}
			before := sourceObjects(t, admin)
			stdout, stderr, code := runPlan(t, writePipeline(t, fmt.Sprintf("plan_refused_%d", i), dsn, c.tables, sink))
			wantRefused(t, stdout+stderr, code, c.prefix, c.want...)
			if after := sourceObjects(t, admin); after != before {
				t.Errorf("validate --source changed the source:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// migrateAs creates the walcast schema as the role of dsn, as its first
// walcast run would.
func migrateAs(t *testing.T, dsn string) {
	t.Helper()
	conn := connect(t, dsn)
	if err := schema.Migrate(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
}

// TestPlanRefusalsOfTheServer: a server with wal_level = replica, and a
// wrong password, on a cluster of the test's own (its pg_hba.conf asks
// one role for a password).
func TestPlanRefusalsOfTheServer(t *testing.T) {
	own := pgtest.New(t, pgtest.Options{Settings: []string{"wal_level = replica"}})
	admin := connect(t, own.DSN("postgres"))
	exec1(t, admin, `CREATE TABLE items (id int PRIMARY KEY)`)
	exec1(t, admin, `SET password_encryption = 'scram-sha-256'; CREATE ROLE walcast_pw LOGIN REPLICATION PASSWORD 'right'`)
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
	before := sourceObjects(t, admin)

	t.Run("wal_level replica", func(t *testing.T) {
		p := writePipeline(t, "plan_replica", own.DSN("postgres"), []string{"public.items"}, sinkSpec{ID: "hook", URL: "http://127.0.0.1:1/"})
		stdout, stderr, code := runPlan(t, p)
		wantRefused(t, stdout+stderr, code, "wal_level = replica", `wal_level is "replica" but logical decoding needs "logical"`, "ALTER SYSTEM SET wal_level = logical")
	})
	t.Run("wrong password", func(t *testing.T) {
		// The default sslmode (prefer) first tries TLS, which this server
		// refuses: that attempt must not be what the line leads with.
		dsn := fmt.Sprintf("postgres://walcast_pw:wrong@%s:%d/postgres", own.Host, own.Port)
		waitFor(t, "the reloaded pg_hba.conf to ask for a password", time.Minute, func() bool {
			_, err := pgx.Connect(context.Background(), dsn)
			return err != nil && strings.Contains(err.Error(), "28P01")
		})
		p := writePipeline(t, "plan_pw", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: "http://127.0.0.1:1/"})
		// walcast run and status say it in one line too, the cause first:
		// no warning about announcing itself before, no TLS attempt.
		for _, c := range []struct {
			args   []string
			prefix string
		}{
			{[]string{"run", p}, "walcast run: role walcast_pw could not log in: wrong password"},
			{[]string{"status", p}, "walcast: role walcast_pw could not log in: wrong password"},
		} {
			out, code := walcastOut(t, c.args...)
			if code != 1 || strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.HasPrefix(out, c.prefix) || strings.Contains(out, "tls") {
				t.Errorf("walcast %s with a wrong password: exit %d, want 1 and one line starting %q:\n%s", c.args[0], code, c.prefix, out)
			}
		}
		stdout, stderr, code := runPlan(t, p)
		wantRefused(t, stdout+stderr, code, "source: role walcast_pw could not log in: wrong password", "correct the password in the dsn", "28P01")
		for _, l := range planLines(stdout, "!") {
			if strings.Contains(l, "tls error") || strings.Contains(l, "wrong") && strings.Contains(l, "\t") {
				t.Errorf("the refusal carries pgx's other attempts: %s", l)
			}
		}
	})
	if after := sourceObjects(t, admin); after != before {
		t.Errorf("validate --source changed the source:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestCleanPlanThenRun: a plan without refusals exits 0 and lists what
// walcast run creates; walcast run then starts, and creates exactly that.
// A second plan, of the running pipeline, creates nothing new and shows
// the slot in use.
func TestCleanPlanThenRun(t *testing.T) {
	dsn, admin := newSource(t,
		`CREATE TABLE items (id int PRIMARY KEY, body text)`,
		`CREATE TABLE parts (id int, region text, PRIMARY KEY (id, region)) PARTITION BY LIST (region)`,
		`CREATE TABLE parts_eu PARTITION OF parts FOR VALUES IN ('eu')`)
	rcv := newReceiver(t)
	p := writePipeline(t, "plan_clean", dsn, []string{"public.items", "public.parts"}, sinkSpec{ID: "hook", URL: rcv.URL})
	before := sourceObjects(t, admin)
	stdout, stderr, code := runPlan(t, p)
	if code != 0 {
		t.Fatalf("validate --source: exit %d, want 0:\n%s%s", code, stdout, stderr)
	}
	if after := sourceObjects(t, admin); after != before {
		t.Fatalf("validate --source changed the source:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	wantAll(t, stdout, `walcast run would start pipeline "plan_clean"; it would create schema walcast, publication walcast_plan_clean, publication walcast_plan_clean_keyless, replication slot walcast_plan_clean.`,
		"ok  wal_level = logical", "ok  table public.items: primary key (id)", "TOAST columns body",
		"table public.parts: primary key (id, region); partitioned (published through its root)",
		"ok  sink hook (webhook): plugin "+filepath.Join(binDir, "walcast-sink-webhook"), "config accepted by the plugin")
	if refused := planLines(stdout, "!"); len(refused) > 0 {
		t.Errorf("a clean plan refuses: %v", refused)
	}

	w := startWalcast(t, p)
	w.waitLog(t, "streaming from slot")
	for _, created := range []string{"schema walcast", "publication walcast_plan_clean", "publication walcast_plan_clean_keyless", "slot walcast_plan_clean"} {
		if !strings.Contains(sourceObjects(t, admin), created) {
			t.Errorf("the plan said walcast run creates %s; it did not", created)
		}
	}
	exec1(t, admin, `INSERT INTO items VALUES (1, 'x')`)
	waitFor(t, "the insert at the receiver", time.Minute, func() bool { return rcv.distinct() >= 1 })

	running := sourceObjects(t, admin)
	stdout, _, code = runPlan(t, p)
	wantAll(t, stdout, "ok  replication slot walcast_plan_clean: exists (plugin pgoutput, confirmed up to", "in use by server process",
		"ok  schema walcast: exists (owned by role", "ok  publication walcast_plan_clean: exists (created by walcast, publishes public.items, public.parts)",
		`walcast run would start pipeline "plan_clean"; it would create nothing.`)
	if code != 0 {
		t.Errorf("plan of a running pipeline: exit %d", code)
	}
	if now := sourceObjects(t, admin); now != running {
		t.Errorf("validate --source of a running pipeline changed the source:\nbefore:\n%s\nafter:\n%s", running, now)
	}
	w.stop()
}

// TestPlanShowsTheRefusalOfALostSlot: a slot dropped while walcast was
// stopped is a refusal of walcast run (docs/reference/errors.md, "The
// slot, publication or database changed under walcast"), so it
// is one of the plan's, with the ways out.
func TestPlanShowsTheRefusalOfALostSlot(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY)`)
	rcv := newReceiver(t)
	p := writePipeline(t, "plan_lost", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL})
	streamItems(t, db, p, "walcast_plan_lost", rcv, 1, 3)
	exec1(t, db, `SELECT pg_drop_replication_slot('walcast_plan_lost')`)
	stdout, stderr, code := runPlan(t, p)
	wantRefused(t, stdout+stderr, code, "replication slot walcast_plan_lost", "walcast run refuses to start (slot lost)", "--accept-gap")
	if slotCount(t, db, "walcast_plan_lost") != 0 {
		t.Error("the plan created the lost slot again")
	}
}

// TestPlanRuleColumns: validate --source refuses a filter, route or
// transform that names a column none of the sink's tables has, at the
// place in the file where the expression names it.
func TestPlanRuleColumns(t *testing.T) {
	parallel(t)
	dsn, _ := newSource(t, `CREATE TABLE items (id int PRIMARY KEY, body text)`)
	top := "  filter = \"op != 'delete' && new.bdy == 'x'\"\n  transform {\n    mask = { secret = \"redact\" }\n  }\n"
	file := writePipeline(t, "plan_rule_columns", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: "http://127.0.0.1:1/hook", Top: top})
	stdout, stderr, code := runPlan(t, file)
	out := stdout + stderr
	wantRefused(t, out, code, file+":9:34: sink \"hook\": new.bdy", `names column "bdy", which none of its tables has (public.items)`)
	wantRefused(t, out, code, file+":11:14: sink \"hook\": mask.secret", `names column "secret"`)
	if strings.Contains(out, `"body"`) || strings.Contains(out, `"id"`) {
		t.Fatalf("a column the table has was refused:\n%s", out)
	}
}

// TestPlanOutboxColumns: validate --source refuses an outbox block naming
// a column its table lacks (by hand or by default) and a payload column
// the outbox cannot send as it is, each at its place in the file.
func TestPlanOutboxColumns(t *testing.T) {
	parallel(t)
	dsn, _ := newSource(t, `CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, payload bytea)`)
	top := "  outbox {\n    table = \"public.outbox\"\n    key_column = \"agg\"\n  }\n"
	file := writePipeline(t, "plan_outbox_columns", dsn, []string{"public.outbox"}, sinkSpec{ID: "hook", URL: "http://127.0.0.1:1/hook", Top: top})
	stdout, stderr, code := runPlan(t, file)
	out := stdout + stderr
	wantRefused(t, out, code, file+":11:18: sink \"hook\"", `the outbox table public.outbox has no column "agg" (key_column)`)
	wantRefused(t, out, code, file+":9:3: sink \"hook\"", `payload column public.outbox.payload is of type bytea`)
	if strings.Contains(out, `"aggregatetype"`) || strings.Contains(out, `"type"`) {
		t.Fatalf("a column the table has was refused:\n%s", out)
	}
}
