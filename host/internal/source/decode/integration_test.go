package decode

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/source/pgoutput"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/host/pgtest"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// TestPostgres decodes a real pgoutput stream. It starts its own cluster
// rather than one in TestMain so that fuzz workers, which run TestMain too,
// do not each start PostgreSQL.
func TestPostgres(t *testing.T) {
	cluster := pgtest.New(t, pgtest.Options{})
	dsn := cluster.Database(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`CREATE TYPE mood AS ENUM ('sad', 'happy')`)
	exec(`CREATE TABLE sink (
		id bigint PRIMARY KEY,
		small smallint, i int, r real, d double precision, n numeric(12,2), b bool,
		t text, vc varchar(10), ch char(3), by bytea, j json, jb jsonb, u uuid,
		dt date, ts timestamp, tstz timestamptz, iv interval, ia int[], ta text[], m mood,
		big text)`)
	exec(`ALTER TABLE sink ALTER COLUMN big SET STORAGE EXTERNAL`)
	exec(`CREATE TABLE full_t (a int PRIMARY KEY, b text, c int)`)
	exec(`ALTER TABLE full_t REPLICA IDENTITY FULL`)
	// FOR ALL TABLES includes the control schema; the decoder drops it.
	exec(`CREATE SCHEMA walcast`)
	exec(`CREATE TABLE walcast.cp (k int PRIMARY KEY)`)
	exec(`CREATE PUBLICATION walcast_test FOR ALL TABLES`)

	repl := replicationConn(ctx, t, dsn)
	slot, err := pglogrepl.CreateReplicationSlot(ctx, repl, "walcast_decode_test", "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true})
	if err != nil {
		t.Fatalf("create slot: %v", err)
	}
	start, err := pglogrepl.ParseLSN(slot.ConsistentPoint)
	if err != nil {
		t.Fatal(err)
	}

	// 100 KB of incompressible-looking text, stored out of line.
	rng := rand.New(rand.NewPCG(1, 2))
	var big strings.Builder
	for big.Len() < 100_000 {
		big.WriteByte("abcdefghijklmnopqrstuvwxyz0123456789 "[rng.IntN(37)])
	}

	// Each transaction returns its xid so the envelopes can be checked.
	var xids []uint64
	tx := func(stmts ...string) {
		t.Helper()
		txn, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer txn.Rollback(ctx)
		for _, s := range stmts {
			args := []any{}
			if strings.Contains(s, "$1") {
				args = append(args, big.String())
			}
			if _, err := txn.Exec(ctx, s, args...); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		var xid uint64
		if err := txn.QueryRow(ctx, `SELECT txid_current()`).Scan(&xid); err != nil {
			t.Fatal(err)
		}
		if err := txn.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		xids = append(xids, xid)
	}
	tx(`INSERT INTO sink VALUES (1, -7, 42, 1.5, 'NaN', 12345.6, true,
			E'he said "hi"\n', 'short', 'ab', '\x0a0b0c', '{"a": [1, 2]}', '{"b": {"c": null}, "a": 1}',
			'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2026-11-30', '2026-11-30 10:00:00.5',
			'2026-11-30 12:00:00.123456+02', '1 day 02:03:04', '{1,NULL,3}',
			ARRAY['a b', 'x"y', NULL, 'NULL', 'back\slash'], 'happy', $1)`,
		`INSERT INTO walcast.cp VALUES (1)`,
		`INSERT INTO full_t VALUES (1, 'x', NULL)`)
	tx(`UPDATE sink SET i = 43, d = '-Infinity', ta = '{}', tstz = 'infinity' WHERE id = 1`)
	tx(`UPDATE sink SET id = 2 WHERE id = 1`)
	tx(`UPDATE full_t SET b = 'y'`)
	tx(`DELETE FROM sink`, `DELETE FROM full_t`)
	tx(`TRUNCATE sink, full_t RESTART IDENTITY`)

	err = pglogrepl.StartReplication(ctx, repl, slot.SlotName, start, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'walcast_test'"},
	})
	if err != nil {
		t.Fatalf("start replication: %v", err)
	}

	var pkCalls []string
	d := New(Options{PrimaryKey: func(schema, table string) ([]string, error) {
		pkCalls = append(pkCalls, schema+"."+table)
		return primaryKey(ctx, conn, schema, table)
	}})
	events, commits := readStream(ctx, t, repl, d, start, len(xids))

	const row = `"id":1,"small":-7,"i":42,"r":1.5,"d":"NaN","n":"12345.60","b":true,` +
		`"t":"he said \"hi\"\n","vc":"short","ch":"ab ","by":"CgsM","j":{"a":[1,2]},"jb":{"a":1,"b":{"c":null}},` +
		`"u":"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11","dt":"2026-11-30","ts":"2026-11-30T10:00:00.500000",` +
		`"tstz":"2026-11-30T10:00:00.123456Z","iv":"1 day 02:03:04","ia":[1,null,3],` +
		`"ta":["a b","x\"y",null,"NULL","back\\slash"],"m":"happy"`
	row2 := strings.NewReplacer(`"i":42`, `"i":43`, `"d":"NaN"`, `"d":"-Infinity"`,
		`"ta":["a b","x\"y",null,"NULL","back\\slash"]`, `"ta":[]`,
		`"tstz":"2026-11-30T10:00:00.123456Z"`, `"tstz":"infinity"`).Replace(row)
	sinkHead := `"schema":"public","table":"sink",`
	fullHead := `"schema":"public","table":"full_t",`
	want := []struct {
		tx   int
		key  string
		tail string
	}{
		{0, `{"id":1}`, sinkHead + `"op":"insert","key":{"id":1},"new":{` + row + `,"big":"` + big.String() + `"},"old":null}`},
		{0, `{"a":1}`, fullHead + `"op":"insert","key":{"a":1},"new":{"a":1,"b":"x","c":null},"old":null}`},
		{1, `{"id":1}`, sinkHead + `"op":"update","key":{"id":1},"new":{` + row2 + `},"old":null,"unchanged":["big"]}`},
		{2, `{"id":2}`, sinkHead + `"op":"update","key":{"id":2},"new":{` + strings.Replace(row2, `"id":1`, `"id":2`, 1) + `},"old":{"id":1},"unchanged":["big"]}`},
		{3, `{"a":1}`, fullHead + `"op":"update","key":{"a":1},"new":{"a":1,"b":"y","c":null},"old":{"a":1,"b":"x","c":null}}`},
		{4, `{"id":2}`, sinkHead + `"op":"delete","key":{"id":2},"new":null,"old":{"id":2}}`},
		{4, `{"a":1}`, fullHead + `"op":"delete","key":{"a":1},"new":null,"old":{"a":1,"b":"y","c":null}}`},
		{5, `null`, sinkHead + `"op":"truncate","key":null,"new":null,"old":null,"cascade":false,"restart_identity":true}`},
		{5, `null`, fullHead + `"op":"truncate","key":null,"new":null,"old":null,"cascade":false,"restart_identity":true}`},
	}
	if len(events) != len(want) {
		for _, ev := range events {
			t.Logf("%.300s", ev.Payload)
		}
		t.Fatalf("got %d events, want %d", len(events), len(want))
	}

	headRE := regexp.MustCompile(`^\{"id":"([0-9A-F]+/[0-9A-F]+):(\d+)","commit_lsn":"([0-9A-F]+/[0-9A-F]+)","xid":(\d+),"commit_time":"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)",`)
	index := 0
	for i, w := range want {
		ev := events[i]
		if i > 0 && want[i-1].tx == w.tx {
			index++
		} else {
			index = 0
		}
		commit := commits[w.tx]
		wantHead := fmt.Sprintf(`{"id":"%s:%d","commit_lsn":"%s","xid":%d,"commit_time":"%s",`,
			commit.CommitLSN, index, commit.CommitLSN, xids[w.tx], commit.CommitTime.UTC().Format("2006-01-02T15:04:05.000000Z"))
		payload := string(ev.Payload)
		if !headRE.MatchString(payload) || !strings.HasPrefix(payload, wantHead) {
			t.Errorf("event %d: head\n got %.200s\nwant %s", i, payload, wantHead)
			continue
		}
		if got := payload[len(wantHead):]; got != w.tail {
			t.Errorf("event %d: tail\n got %.2000s\nwant %.2000s", i, got, w.tail)
		}
		wantID := cdc.EventID{CommitLSN: uint64(commit.CommitLSN), Index: uint64(index)}
		if ev.ID != wantID || string(ev.Key) != w.key {
			t.Errorf("event %d: id %s key %s, want %s %s", i, ev.ID, ev.Key, wantID, w.key)
		}
	}
	// Asked for the FULL table only, once per Relation message (pgoutput
	// sends another after TRUNCATE gives the table a new relfilenode).
	if len(pkCalls) == 0 || slices.ContainsFunc(pkCalls, func(c string) bool { return c != "public.full_t" }) {
		t.Errorf("PrimaryKey called for %v, want only public.full_t", pkCalls)
	}
}

func replicationConn(ctx context.Context, t *testing.T, dsn string) *pgconn.PgConn {
	t.Helper()
	cfg, err := pgconn.ParseConfig(dsn + "&replication=database")
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["TimeZone"] = "UTC"
	cfg.RuntimeParams["DateStyle"] = "ISO"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("replication connection: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// readStream decodes the stream until n transactions have committed and
// returns the events and the commit messages. It answers keepalives the way
// the capture loop does, with the flush position set explicitly.
func readStream(ctx context.Context, t *testing.T, conn *pgconn.PgConn, d *Decoder, start pglogrepl.LSN, n int) ([]change.Event, []*pglogrepl.CommitMessage) {
	t.Helper()
	var events []change.Event
	var commits []*pglogrepl.CommitMessage
	emit := func(ev change.Event) error {
		events = append(events, ev)
		return nil
	}
	for len(commits) < n {
		raw, err := conn.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("receive after %d commits: %v", len(commits), err)
		}
		switch m := raw.(type) {
		case *pgproto3.ErrorResponse:
			t.Fatalf("server error: %s", m.Message)
		case *pgproto3.CopyData:
			switch m.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					t.Fatal(err)
				}
				if ka.ReplyRequested {
					err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
						WALWritePosition: start, WALFlushPosition: start, WALApplyPosition: start,
					})
					if err != nil {
						t.Fatal(err)
					}
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(m.Data[1:])
				if err != nil {
					t.Fatal(err)
				}
				msg, err := pgoutput.Parse(xld.WALData)
				if err != nil {
					t.Fatal(err)
				}
				if c, ok := msg.(*pglogrepl.CommitMessage); ok {
					commits = append(commits, c)
				}
				if err := d.Decode(msg, emit); err != nil {
					t.Fatalf("decode %T: %v", msg, err)
				}
			}
		}
	}
	return events, commits
}

// primaryKey is what the host's PrimaryKey option does: the primary key
// columns in key order.
func primaryKey(ctx context.Context, conn *pgx.Conn, schema, table string) ([]string, error) {
	rows, err := conn.Query(ctx, `
		SELECT a.attname
		FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
		WHERE i.indrelid = format('%I.%I', $1::text, $2::text)::regclass AND i.indisprimary
		ORDER BY array_position(i.indkey::int2[], a.attnum)`, schema, table)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
