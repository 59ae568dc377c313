package schedule

import (
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

// An update that changed the key waits for the earlier changes of both its
// rows, and holds both while in flight.
func TestKeyChangeWaitsForBothRows(t *testing.T) {
	p := newPending()
	mk := func(idx uint64, row, oldRow string) *entry {
		return &entry{ev: pluginkit.Event{ID: pluginkit.EventID{CommitLSN: 1, Index: idx}}, row: row, oldRow: oldRow, bytes: 1}
	}
	lim := limits{events: 1, bytes: 1 << 20}
	p.add(mk(0, "a", ""))  // insert of row a
	p.add(mk(1, "b", "a")) // update moving a to b
	p.add(mk(2, "c", ""))  // an unrelated row
	now := time.Now()
	first, _ := p.take(now, lim)
	if len(first) != 1 || first[0].ev.ID.Index != 0 {
		t.Fatalf("first batch %v", first)
	}
	second, _ := p.take(now, lim)
	if len(second) != 1 || second[0].ev.ID.Index != 2 {
		t.Fatalf("with row a in flight the key change must wait; got %v", second)
	}
	p.landed(first)
	third, _ := p.take(now, lim)
	if len(third) != 1 || third[0].ev.ID.Index != 1 {
		t.Fatalf("after row a landed the key change goes; got %v", third)
	}
	p.add(mk(3, "a", "")) // a new row a, after the move
	if b, _ := p.take(now, lim); len(b) != 0 {
		t.Fatalf("row a must wait for the key change in flight; got %v", b)
	}
	p.landed(third)
	if b, _ := p.take(now, lim); len(b) != 1 || b[0].ev.ID.Index != 3 {
		t.Fatalf("got %v", b)
	}
}
