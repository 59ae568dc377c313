package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// mirror applies a stream of events, in the order a sink received them,
// to an in-memory copy of tables with columns (id int, v int): what a
// consumer replicating the stream would end up with.
type mirror map[string]map[int]int

func applyStream(t testing.TB, evs []received) mirror {
	t.Helper()
	m := mirror{}
	seen := map[string]bool{}
	for _, e := range evs {
		if seen[e.ID.String()] {
			continue // a redelivery: the consumer dedupes on the id
		}
		seen[e.ID.String()] = true
		var ev struct {
			New *struct{ ID, V int } `json:"new"`
			Old *struct{ ID int }    `json:"old"`
			Key *struct{ ID int }    `json:"key"`
		}
		if err := json.Unmarshal(e.Raw, &ev); err != nil {
			t.Fatalf("event %s: %v", e.ID, err)
		}
		tb := m[e.Table]
		if tb == nil {
			tb = map[int]int{}
			m[e.Table] = tb
		}
		switch e.Op {
		case "insert", "update", "read":
			tb[ev.New.ID] = ev.New.V
		case "delete":
			delete(tb, ev.Key.ID)
		case "truncate":
			clear(tb)
		default:
			t.Fatalf("event %s: op %s", e.ID, e.Op)
		}
	}
	return m
}

// tableRows reads a (id int, v int) table.
func tableRows(t testing.TB, db *pgx.Conn, table string) map[int]int {
	t.Helper()
	rows, err := db.Query(context.Background(), "SELECT id, v FROM "+table)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int{}
	for rows.Next() {
		var id, v int
		if err := rows.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		out[id] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkMirror compares the mirror of each table with the table and logs
// the row counts.
func checkMirror(t testing.TB, db *pgx.Conn, m mirror, tables ...string) {
	t.Helper()
	for _, tb := range tables {
		want := tableRows(t, db, "public."+tb)
		got := m[tb]
		t.Logf("table %s: %d rows, mirror %d rows", tb, len(want), len(got))
		if !maps.Equal(want, got) && !(len(want) == 0 && len(got) == 0) {
			t.Errorf("mirror of %s has %d rows, the table %d: the stream applied in order does not rebuild the table", tb, len(got), len(want))
		}
	}
}

// TestTruncateOrderedWithItsRows: rounds of (20 inserts, 6 updates,
// TRUNCATE) from concurrent writers, with a multi-table TRUNCATE now and
// then, delivered with small batches and 8 batches in flight. Every
// committed change arrives (test_decoding is the truth), and a consumer
// applying the stream in arrival order ends with exactly the source
// tables: no row change overtakes or trails a truncate of its table.
func TestTruncateOrderedWithItsRows(t *testing.T) {
	dsn := cluster.Database(t)
	db := connect(t, dsn)
	exec1(t, db, `CREATE TABLE a (id int PRIMARY KEY, v int NOT NULL)`)
	exec1(t, db, `CREATE TABLE b (id int PRIMARY KEY, v int NOT NULL)`)
	exec1(t, db, `CREATE SEQUENCE ids`)
	rcv := newReceiver(t)
	pipeline := writePipeline(t, "trunc", dsn, []string{"public.a", "public.b"},
		sinkSpec{ID: "hook", URL: rcv.URL, Batch: 5, Extra: "    max_in_flight = 8\n"})
	truthSlot(t, db, "truth_trunc")
	proc := startWalcast(t, pipeline)
	waitSlot(t, db, "walcast_trunc")

	const writers, rounds = 3, 40
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close(ctx)
			r := rand.New(rand.NewPCG(uint64(w), 42))
			for round := range rounds {
				tb := []string{"a", "b"}[r.IntN(2)]
				var ids []int
				for range 20 {
					var id int
					if err := conn.QueryRow(ctx, "INSERT INTO "+tb+" VALUES (nextval('ids'), $1) RETURNING id", round).Scan(&id); err != nil {
						errs <- err
						return
					}
					ids = append(ids, id)
				}
				for _, id := range ids[:6] {
					if _, err := conn.Exec(ctx, "UPDATE "+tb+" SET v = v + 1000 WHERE id = $1", id); err != nil {
						errs <- err
						return
					}
				}
				trunc := "TRUNCATE " + tb
				if round%7 == 0 {
					trunc = "TRUNCATE a, b"
				}
				if _, err := conn.Exec(ctx, trunc); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	wg.Wait()
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	exec1(t, db, `INSERT INTO a SELECT nextval('ids'), 1 FROM generate_series(1, 20)`)
	exec1(t, db, `INSERT INTO b SELECT nextval('ids'), 2 FROM generate_series(1, 15)`)
	want := truth(t, db, "truth_trunc", map[string]bool{"public.a": true, "public.b": true})
	waitFor(t, fmt.Sprintf("%d events", len(want)), 3*time.Minute, func() bool { return rcv.distinct() == len(want) })
	proc.stop()
	got := rcv.events()
	verify(t, want, got)
	if n := wrongSideOfTruncate(got); n > 0 {
		t.Errorf("%d row changes arrived on the wrong side of a truncate of their table", n)
	}
	checkMirror(t, db, applyStream(t, got), "a", "b")
}

// wrongSideOfTruncate counts, over the first deliveries in arrival order,
// the row changes that arrived before an earlier truncate of their table or
// after a later one.
func wrongSideOfTruncate(evs []received) int {
	seen := map[string]bool{}
	var first []received
	for _, e := range evs {
		if !seen[e.ID.String()] {
			seen[e.ID.String()] = true
			first = append(first, e)
		}
	}
	n := 0
	for i, tr := range first {
		if tr.Op != "truncate" {
			continue
		}
		for j, e := range first {
			if e.Table == tr.Table && e.Op != "truncate" && (j < i) != (e.ID.Compare(tr.ID) < 0) {
				n++
			}
		}
	}
	return n
}
