package backfill

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/control/schema"
	"github.com/walcast/walcast/host/pgtest"
)

// TestChunksKeepTheirSize: a backfill reads a table in chunks of at most
// ChunkRows rows, composite keys included, each row once.
func TestChunksKeepTheirSize(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.New(t, pgtest.Options{}).Database(t)
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	for _, sql := range []string{
		`CREATE TABLE c (b text, a int, v int, PRIMARY KEY (a, b))`,
		`INSERT INTO c SELECT 'k' || (g % 13), g, 0 FROM generate_series(1, 5000) g`,
	} {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if err := schema.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	tbl, err := Inspect(ctx, db, "public.c")
	if err != nil {
		t.Fatal(err)
	}
	// Pages in index order (a, b); the event key in table order (b, a),
	// as pgoutput flags the identity columns.
	if len(tbl.PageKey) != 2 || tbl.Columns[tbl.PageKey[0]].Name != "a" || len(tbl.EventKey) != 2 || tbl.Columns[tbl.EventKey[0]].Name != "b" {
		t.Fatalf("page key %v, event key %v", tbl.PageKey, tbl.EventKey)
	}
	ids, err := Request(ctx, db, "p", []Table{tbl}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := NewRunner(Config{DSN: dsn, Pipeline: "p", ChunkRows: 400})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(runCtx) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := Get(ctx, db, ids[0])
		if err != nil {
			t.Fatal(err)
		}
		if b.State == StateDone {
			if b.Rows != 5000 {
				t.Fatalf("backfill read %d rows, want 5000", b.Rows)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backfill still %s", b.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The state is committed inside the last chunk, before the runner
	// counts that chunk: wait for its count, then stop it.
	var st Stats
	for {
		st, _ = r.StatsOf(ids[0])
		if st.Rows == 5000 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done
	// The first chunk is 100 rows (row widths unknown), then 400 each.
	if st.Chunks != 14 {
		t.Fatalf("%d chunks for 5000 rows in chunks of 100, then 400: want 14", st.Chunks)
	}
}
