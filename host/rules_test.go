package host_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/walcast/walcast/host"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Library mode takes the same filter and transform as a sink: Next
// returns only the selected events, transformed; an event on which the
// filter fails comes as captured with Err; a transaction of filtered
// events only is released with the events before it.
func TestStreamFilterAndTransform(t *testing.T) {
	dsn, db := setup(t)
	slot := slotName("rules")
	s := openConfig(t, host.StreamConfig{DSN: dsn, Tables: []string{"public.items"}, Slot: slot,
		Filter:    `op == "insert" && (new.v == "keep" || new.v == "boom" && 1 / (new.id - new.id) == 0)`,
		Transform: host.Transform{Mask: map[string]string{"v": "sha256"}, Rename: map[string]string{"id": "item"}}})
	execT(t, db, `INSERT INTO items VALUES (1, 'keep'), (2, 'drop')`)
	execT(t, db, `UPDATE items SET v = 'keep' WHERE id = 2`)
	execT(t, db, `INSERT INTO items VALUES (3, 'boom')`)
	execT(t, db, `INSERT INTO items VALUES (4, 'drop')`) // filtered: released with the ack of 3
	var endText string
	if err := db.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&endText); err != nil {
		t.Fatal(err)
	}
	end, err := cdc.ParseLSN(endText)
	if err != nil {
		t.Fatal(err)
	}

	first := next(t, s)
	if first.Err != nil || string(first.Key) != `{"item":1}` || strings.Contains(string(first.New), "keep") ||
		!strings.Contains(string(first.New), `"item":1`) || !strings.Contains(string(first.JSON()), `"key":{"item":1}`) {
		t.Fatalf("first: key %s new %s err %v", first.Key, first.New, first.Err)
	}
	boom := next(t, s)
	if boom.Err == nil || !strings.Contains(boom.Err.Error(), "division by zero") || !strings.Contains(string(boom.New), "boom") {
		t.Fatalf("failing event: new %s err %v", boom.New, boom.Err)
	}
	ack(t, s, boom.ID)
	waitFor(t, "the filtered last transaction to be released", time.Minute, func() bool {
		return confirmed(t, db, slot) >= end
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if ev, err := s.Next(ctx); err == nil {
		t.Fatalf("Next returned %s %s: filtered events must not be handed over", ev.Op, ev.New)
	}
}
