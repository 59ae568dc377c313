package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestDDLMidStream: while writers change rows without pause, the table
// gains a column (with a default, so PostgreSQL does not rewrite it),
// has a column's type changed (a rewrite), loses a column, gains an
// array column and has a column renamed. Every committed change arrives,
// in row order (test_decoding is the truth), each event carries the
// columns the row had at its commit, and a consumer applying the stream
// ends equal to the table.
func TestDDLMidStream(t *testing.T) {
	dsn, db := newSource(t,
		`CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, note text)`,
		`INSERT INTO items SELECT g, 0, 'n' FROM generate_series(1, 200) g`,
	)
	truthSlot(t, dsn, db, "truth_ddl")
	rcv := newReceiver(t)
	p := writePipeline(t, "ddl", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL})
	w := startCapturing(t, db, p)
	w.waitLog(t, "streaming from slot")

	// Writers touch only id and v, which every step keeps. They stop
	// between statements, never by a cancelled context: a cancelled
	// statement can still commit after the truth is read.
	ctx := context.Background()
	var stopped atomic.Bool
	var wg sync.WaitGroup
	var writes atomic.Int64
	errs := make(chan error, 2)
	for wr := 0; wr < 2; wr++ {
		wg.Go(func() {
			c := connect(t, dsn)
			for i := 0; !stopped.Load(); i++ {
				id := 1 + (i*7+wr*101)%400
				var err error
				switch i % 3 {
				case 0:
					_, err = c.Exec(ctx, `INSERT INTO items (id, v) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET v = items.v + 1`, id, i)
				case 1:
					_, err = c.Exec(ctx, `UPDATE items SET v = v + 1 WHERE id = $1`, id)
				case 2:
					_, err = c.Exec(ctx, `DELETE FROM items WHERE id = $1`, id+200)
				}
				if err != nil {
					errs <- fmt.Errorf("writer %d: %w", wr, err)
					return
				}
				writes.Add(1)
			}
		})
	}
	steps := []string{
		`ALTER TABLE items ADD COLUMN extra int NOT NULL DEFAULT 7`,
		`ALTER TABLE items ALTER COLUMN v TYPE bigint`,
		`ALTER TABLE items DROP COLUMN note`,
		`ALTER TABLE items ADD COLUMN tags text[]`,
		`ALTER TABLE items RENAME COLUMN extra TO extra2`,
	}
	for _, step := range steps {
		before := writes.Load()
		waitFor(t, "writes before "+step, time.Minute, func() bool { return writes.Load() >= before+50 })
		exec1(t, db, step)
	}
	before := writes.Load()
	waitFor(t, "writes after the last step", time.Minute, func() bool { return writes.Load() >= before+50 })
	stopped.Store(true)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	exec1(t, db, `UPDATE items SET tags = ARRAY['t' || id]`) // every row's last event has today's columns

	want := truth(t, db, "truth_ddl", map[string]bool{"public.items": true})
	waitFor(t, fmt.Sprintf("%d changes", len(want)), 2*time.Minute, func() bool { return rcv.distinct() >= len(want) })
	w.stop()
	verify(t, want, rcv.events())
	checkRowMirror(t, db, "public.items", []string{"id"}, rcv.events())

	// The columns of each event are the row's at its commit: the first
	// events carry note and no extra, the last ones extra2 and tags. First
	// and last in commit order: rows travel in lanes of their own, so the
	// last to arrive may be an earlier transaction's delete.
	evs := slices.Clone(rcv.events())
	slices.SortFunc(evs, func(a, b received) int { return a.ID.Compare(b.ID) })
	first, last := parseFull(t, evs[0]), parseFull(t, evs[len(evs)-1])
	if _, ok := first.New["note"]; !ok {
		t.Errorf("first event %s has no note: %v", first.ID, first.New)
	}
	if _, ok := last.New["extra2"]; !ok || last.New["note"] != nil {
		t.Errorf("last event %s: %v, want extra2 and no note", last.ID, last.New)
	}
	b, _ := json.Marshal(last.New)
	t.Logf("%d writes, %d changes; last event: %s", writes.Load(), len(want), b)
}

// TestTableRenamedMidStream: a captured table renamed while walcast
// streams is published under its new name, which the pipeline does not
// list. walcast stops and says so rather than dropping its changes as
// another table's.
func TestTableRenamedMidStream(t *testing.T) {
	dsn, db := newSource(t, `CREATE TABLE items (id int PRIMARY KEY)`)
	rcv := newReceiver(t)
	p := writePipeline(t, "rename", dsn, []string{"public.items"}, sinkSpec{ID: "hook", URL: rcv.URL})
	streamItems(t, db, p, "walcast_rename", rcv, 1, 5)
	w := startWalcast(t, p, "--slot-check-interval", "200ms")
	w.waitLog(t, "streaming from slot")
	exec1(t, db, `ALTER TABLE items RENAME TO goods`)
	exec1(t, db, `INSERT INTO goods VALUES (6)`)
	w.waitExit1(t, time.Minute, "its table was renamed")
	out := w.logText()
	wantAll(t, out, "table public.items (renamed to public.goods) is no longer published by publication walcast_rename under the name the pipeline lists", "walcast backfill")
	for _, r := range rcv.events() {
		// The schema event saying so is delivered (TestTableVanishedMidStream).
		if r.Op != "schema" && (r.Table == "goods" || r.Key == `{"id":6}`) {
			t.Fatalf("the renamed table's insert was delivered as if listed: %s", r.Raw)
		}
	}
}
