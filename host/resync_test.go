package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/walcast/walcast/host"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// TestStreamResyncTracker heals a consumer's copy that missed changes
// (it holds rows the table no longer has, and old values of others)
// through library mode: Stream.Resync while a writer deletes, updates and
// inserts, every event from Next applied to the copy, and at resync_end
// the rows ResyncTracker did not see removed. The copy then equals the
// table; without the sweep it would keep the rows it should not have. A
// second resync of the table while one runs is refused.
func TestStreamResyncTracker(t *testing.T) {
	dsn, db := setup(t)
	ctx := context.Background()
	execT(t, db, `INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 3000) g`)
	s := open(t, dsn, slotName("lib_resync"))
	// The copy as an old backup left it: rows deleted since, stale values.
	copyOf := map[string]string{}
	for i := 1; i <= 3500; i++ {
		copyOf[fmt.Sprintf(`{"id":%d}`, i)] = "old"
	}
	id, err := s.Resync(ctx, "public.items")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resync(ctx, "public.items"); err == nil {
		t.Fatal("a second resync of items while one runs was accepted")
	}
	writes := make(chan error, 1)
	go func() {
		for i := 0; i < 300; i++ {
			k := 1 + (i*37)%3000
			sql := [...]string{
				fmt.Sprintf(`UPDATE items SET v = 'u%d' WHERE id = %d`, i, k),
				fmt.Sprintf(`DELETE FROM items WHERE id = %d`, k),
				fmt.Sprintf(`INSERT INTO items VALUES (%d, 'n%d')`, 10000+i, i),
			}[i%3]
			if _, err := db.Exec(ctx, sql); err != nil {
				writes <- err
				return
			}
		}
		writes <- nil
	}()
	var tracker host.ResyncTracker
	var swept *host.Sweep
	deadline := time.Now().Add(2 * time.Minute)
	// Until the sweep; the writer's later changes are read below, after
	// the "end" row (waiting here for the writer too could block on a
	// Next after its last change was already read).
	for swept == nil {
		if time.Now().After(deadline) {
			t.Fatal("no resync_end after 2 minutes")
		}
		ev := next(t, s)
		if ev.Op == cdc.OpResyncBegin && ev.Resync != id {
			t.Fatalf("resync_begin %s carries resync %d, want %d", ev.ID, ev.Resync, id)
		}
		if sw := tracker.Observe(&ev); sw != nil {
			for k := range copyOf {
				if !sw.Seen([]byte(k)) {
					delete(copyOf, k)
				}
			}
			swept = sw
		}
		switch ev.Op {
		case cdc.OpRead, cdc.OpInsert, cdc.OpUpdate:
			var row struct{ V string }
			json.Unmarshal(ev.New, &row)
			copyOf[string(ev.Key)] = row.V
		case cdc.OpDelete:
			delete(copyOf, string(ev.Key))
		}
		ack(t, s, ev.ID)
	}
	if err := <-writes; err != nil {
		t.Fatal(err)
	}
	execT(t, db, `INSERT INTO items VALUES (-1, 'end')`)
	for copyOf[`{"id":-1}`] != "end" {
		ev := next(t, s)
		tracker.Observe(&ev)
		switch ev.Op {
		case cdc.OpInsert, cdc.OpUpdate:
			var row struct{ V string }
			json.Unmarshal(ev.New, &row)
			copyOf[string(ev.Key)] = row.V
		case cdc.OpDelete:
			delete(copyOf, string(ev.Key))
		}
		ack(t, s, ev.ID)
	}
	want := map[string]string{}
	rows, err := db.Query(ctx, `SELECT id, v FROM items`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k int
		var v string
		rows.Scan(&k, &v)
		want[fmt.Sprintf(`{"id":%d}`, k)] = v
	}
	rows.Close()
	if !reflect.DeepEqual(copyOf, want) {
		t.Fatalf("the healed copy (%d rows) differs from the table (%d rows)", len(copyOf), len(want))
	}
	if swept.Schema != "public" || swept.Table != "items" || swept.Resync != id {
		t.Fatalf("sweep of %s.%s resync %d, want public.items resync %d", swept.Schema, swept.Table, swept.Resync, id)
	}
}
