package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/walcast/walcast/host"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Acking the last event of a transaction and calling Close at once, with
// no pause in between, must still release the transaction: the slot's
// confirmed_flush_lsn passes it and the next stream starts after it.
func TestCloseRightAfterAckConfirmsIt(t *testing.T) {
	for round := range 20 { // the race is between Close and capture reading the commit
		dsn, db := setup(t)
		slot := slotName("closeack")
		// A small buffer: capture hands over the last event and only then
		// reads its commit record.
		s := openConfig(t, host.StreamConfig{DSN: dsn, Tables: []string{"public.items"}, Slot: slot, Buffer: 1})
		for tx := range 5 {
			execT(t, db, `INSERT INTO items SELECT g, 'x' FROM generate_series($1::int, $1::int + 9) g`, tx*10)
		}
		var last host.Event
		for range 50 {
			last = next(t, s)
		}
		ack(t, s, last.ID)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if got := confirmed(t, db, slot); got <= last.ID.CommitLSN {
			t.Fatalf("round %d: after ack of %s and Close, the slot is at %s: the final ack was lost", round, last.ID, cdc.FormatLSN(got))
		}
		execT(t, db, `INSERT INTO items VALUES (1000, 'after')`)
		s2 := open(t, dsn, slot)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		ev, err := s2.Next(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if ev.ID.Compare(last.ID) <= 0 || string(ev.Key) != `{"id":1000}` {
			t.Fatalf("round %d: reopened stream starts at %s %s, want the change after %s", round, ev.ID, ev.Key, last.ID)
		}
		s2.Close()
	}
}
