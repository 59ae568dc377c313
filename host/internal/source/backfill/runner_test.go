package backfill

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/control/schema"
	"github.com/walcast/walcast/host/internal/source/decode"
	"github.com/walcast/walcast/host/pgtest"
)

// TestChunkHoldsRowsUntilCommit updates a row while the chunk that read it
// is still open: the UPDATE must wait for the chunk's commit, so the WAL
// carries the chunk (with the old value) before the update. Without the
// FOR SHARE lock the UPDATE commits first and the stream would deliver an
// older read after a newer update.
func TestChunkHoldsRowsUntilCommit(t *testing.T) {
	ctx := context.Background()
	cluster := pgtest.New(t, pgtest.Options{})
	dsn := cluster.Database(t)
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	for _, sql := range []string{
		`CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)`,
		`INSERT INTO t SELECT g, 0 FROM generate_series(1, 10) g`,
		`SELECT pg_create_logical_replication_slot('truth', 'test_decoding')`,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := schema.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	tbl, err := Inspect(ctx, db, "public.t")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := Request(ctx, db, "p", []Table{tbl}, nil)
	if err != nil {
		t.Fatal(err)
	}
	writer, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close(ctx)
	watcher, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close(ctx)
	var writerPID int
	writer.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&writerPID)
	updated := make(chan error, 1)
	blocked := false
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	r := NewRunner(Config{DSN: dsn, Pipeline: "p", ChunkRead: func(_, chunk int64) {
		if chunk != 1 {
			return
		}
		go func() {
			_, err := writer.Exec(ctx, `UPDATE t SET v = 99 WHERE id = 5`)
			updated <- err
		}()
		// The update must be seen waiting on a lock, not finished.
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case err := <-updated:
				updated <- err
				return // committed while the chunk was open: the bug
			default:
			}
			var waiting bool
			watcher.QueryRow(ctx, `SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, writerPID).Scan(&waiting)
			if waiting {
				blocked = true
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}})
	done := make(chan struct{})
	go func() { defer close(done); r.Run(runCtx) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := Get(ctx, db, ids[0])
		if err != nil {
			t.Fatal(err)
		}
		if b.State == StateDone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backfill still %s", b.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	<-done
	if err := <-updated; err != nil {
		t.Fatal(err)
	}
	if !blocked {
		t.Fatal("the UPDATE of a row being read did not wait for the chunk to commit")
	}
	rows, err := db.Query(ctx, `SELECT data FROM pg_logical_slot_peek_binary_changes('truth', NULL, NULL)`)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for rows.Next() {
		var data []byte
		rows.Scan(&data)
		line := string(data)
		switch {
		case strings.HasPrefix(line, "message: transactional: 1 prefix: walcast.backfill"):
			c, err := decode.ParseBackfillChunk(data[strings.Index(line, "content:")+len("content:"):])
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(c.Rows, func(r []*string) bool { return *r[0] == "5" && *r[1] == "0" }) {
				t.Fatalf("the chunk did not read row 5 as it was before the update: %s", line)
			}
			order = append(order, "read")
		case strings.HasPrefix(line, "table public.t: UPDATE"):
			order = append(order, "update")
		}
	}
	if strings.Join(order, ",") != "read,update" {
		t.Fatalf("WAL order %v, want the chunk's read before the update", order)
	}
	db.Exec(ctx, `SELECT pg_drop_replication_slot('truth')`)
}

// TestUnreadableTableFailsTheBackfillWithTheGrant: a backfill whose table
// the role may not read (42501) cannot succeed by retrying: it is marked
// failed with the role, the table and the GRANT, and the runner goes on
// with the next backfill instead of retrying it forever.
func TestUnreadableTableFailsTheBackfillWithTheGrant(t *testing.T) {
	ctx := context.Background()
	cluster := pgtest.New(t, pgtest.Options{})
	dsn := cluster.Database(t)
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	for _, sql := range []string{
		`CREATE TABLE secret (id int PRIMARY KEY)`,
		`CREATE TABLE open (id int PRIMARY KEY)`,
		`INSERT INTO secret VALUES (1); INSERT INTO open VALUES (1)`,
		`CREATE ROLE filler LOGIN`,
		`GRANT SELECT, UPDATE ON open TO filler`,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := schema.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `GRANT USAGE ON SCHEMA walcast TO filler; GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA walcast TO filler; GRANT USAGE ON ALL SEQUENCES IN SCHEMA walcast TO filler`); err != nil {
		t.Fatal(err)
	}
	var tables []Table
	for _, name := range []string{"public.secret", "public.open"} {
		tbl, err := Inspect(ctx, db, name)
		if err != nil {
			t.Fatal(err)
		}
		tables = append(tables, tbl)
	}
	ids, err := Request(ctx, db, "p", tables, nil)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	r := NewRunner(Config{DSN: strings.Replace(dsn, "postgres://postgres@", "postgres://filler@", 1), Pipeline: "p"})
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	deadline := time.Now().Add(time.Minute)
	for {
		secret, err := Get(ctx, db, ids[0])
		if err != nil {
			t.Fatal(err)
		}
		open, err := Get(ctx, db, ids[1])
		if err != nil {
			t.Fatal(err)
		}
		if secret.State == StateFailed && open.State == StateDone {
			for _, want := range []string{"role filler", "table secret", "GRANT SELECT, UPDATE ON secret TO filler"} {
				if !strings.Contains(secret.Reason, want) {
					t.Errorf("reason %q lacks %q", secret.Reason, want)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: backfill of secret %s (%q), of open %s (%q)", secret.State, secret.Reason, open.State, open.Reason)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil after a stop", err)
	}
}
