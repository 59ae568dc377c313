package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit/cdc"
)

// TestStreamBackfill backfills a table through library mode while a writer
// changes it, applies every event from Next in order to a mirror, and
// checks the mirror equals the table. Bad requests are refused.
func TestStreamBackfill(t *testing.T) {
	dsn, db := setup(t)
	ctx := context.Background()
	execT(t, db, `INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 5000) g`)
	execT(t, db, `CREATE TABLE nokey (v int)`)
	s := open(t, dsn, slotName("lib_backfill"))
	if _, err := s.Backfill(ctx, "public.nokey"); err == nil || !strings.Contains(err.Error(), "not one of the stream's tables") {
		t.Fatalf("backfill of a table the stream does not capture: %v", err)
	}
	id, err := s.Backfill(ctx, "public.items")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Backfill(ctx, "public.items"); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("by backfill %d", id)) {
		t.Fatalf("second backfill of the same table: %v", err)
	}
	// A writer changes rows throughout.
	writes := make(chan error, 1)
	go func() {
		for i := 0; i < 300; i++ {
			k := 1 + (i*37)%5000
			var sql string
			switch i % 3 {
			case 0:
				sql = fmt.Sprintf(`UPDATE items SET v = 'u%d' WHERE id = %d`, i, k)
			case 1:
				sql = fmt.Sprintf(`DELETE FROM items WHERE id = %d`, k)
			default:
				sql = fmt.Sprintf(`INSERT INTO items VALUES (%d, 'n%d')`, 10000+i, i)
			}
			if _, err := db.Exec(ctx, sql); err != nil {
				writes <- err
				return
			}
		}
		writes <- nil
	}()
	mirror := map[string]string{}
	reads := 0
	deadline := time.Now().Add(2 * time.Minute)
	apply := func() {
		ev := next(t, s)
		var row struct {
			ID int    `json:"id"`
			V  string `json:"v"`
		}
		switch ev.Op {
		case cdc.OpRead, cdc.OpInsert, cdc.OpUpdate:
			if ev.Op == cdc.OpRead {
				reads++
				if ev.Old != nil || ev.Key == nil {
					t.Fatalf("read event %s: key %s old %s", ev.ID, ev.Key, ev.Old)
				}
			}
			json.Unmarshal(ev.New, &row)
			mirror[fmt.Sprint(row.ID)] = row.V
		case cdc.OpDelete:
			json.Unmarshal(ev.Old, &row)
			delete(mirror, fmt.Sprint(row.ID))
		}
		ack(t, s, ev.ID)
	}
	for {
		state, _, _, err := s.BackfillStatus(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if state == "done" && len(writes) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backfill %s after 2 minutes", state)
		}
		apply()
	}
	if err := <-writes; err != nil {
		t.Fatal(err)
	}
	// Drain: a marker row's insert is the last event.
	execT(t, db, `INSERT INTO items VALUES (-1, 'end')`)
	for mirror["-1"] != "end" {
		apply()
	}
	want := map[string]string{}
	rows, err := db.Query(ctx, `SELECT id::text, v FROM items`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k, v string
		rows.Scan(&k, &v)
		want[k] = v
	}
	rows.Close()
	if !reflect.DeepEqual(mirror, want) {
		t.Fatalf("mirror (%d rows) differs from the table (%d rows)", len(mirror), len(want))
	}
	if reads < 4800 {
		t.Fatalf("only %d read events", reads)
	}
}
