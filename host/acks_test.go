package host

import (
	"errors"
	"testing"

	"github.com/walcast/walcast/pluginkit/cdc"
)

func id(lsn, idx uint64) cdc.EventID { return cdc.EventID{CommitLSN: lsn, Index: idx} }

func TestAcksReleaseWholeTransactions(t *testing.T) {
	a := newAcks(50)
	// Transaction A (commit 100, end 108): three events; B (200, 208): two.
	for i := range uint64(3) {
		a.deliver(id(100, i))
	}
	a.commit(id(100, 2), 108)
	a.deliver(id(200, 0))
	if err := a.ack(id(100, 1)); err != nil {
		t.Fatal(err)
	}
	if got := a.position(); got != 50 {
		t.Fatalf("position after acking part of a transaction = %d, want 50", got)
	}
	if err := a.ack(id(100, 2)); err != nil {
		t.Fatal(err)
	}
	if got := a.position(); got != 108 {
		t.Fatalf("position after acking a transaction's last event = %d, want 108", got)
	}
	// B's last event acked before capture saw its commit.
	a.deliver(id(200, 1))
	if err := a.ack(id(200, 1)); err != nil {
		t.Fatal(err)
	}
	if got := a.position(); got != 108 {
		t.Fatalf("position before B's commit = %d, want 108", got)
	}
	a.commit(id(200, 1), 208)
	if got := a.position(); got != 208 {
		t.Fatalf("position after B's commit = %d, want 208", got)
	}
	// A transaction without captured changes is released with what precedes it.
	a.commit(id(200, 1), 300)
	if got := a.position(); got != 300 {
		t.Fatalf("position after an empty transaction = %d, want 300", got)
	}
	if !a.advanceIdle(400, id(200, 1)) || a.position() != 400 {
		t.Fatalf("idle advance refused with nothing in flight")
	}
}

func TestAcksIdleAdvanceWaitsForAcks(t *testing.T) {
	a := newAcks(0)
	if !a.advanceIdle(10, cdc.EventID{}) {
		t.Fatal("idle advance refused on an empty stream")
	}
	a.deliver(id(100, 0))
	a.commit(id(100, 0), 108)
	if a.advanceIdle(500, id(100, 0)) {
		t.Fatal("idle advance passed an unacknowledged transaction")
	}
	if err := a.ack(id(100, 0)); err != nil {
		t.Fatal(err)
	}
	if !a.advanceIdle(500, id(100, 0)) || a.position() != 500 {
		t.Fatalf("idle advance refused after everything was acked; position %d", a.position())
	}
}

func TestAcksRejectInvalid(t *testing.T) {
	a := newAcks(0)
	a.deliver(id(100, 0))
	a.deliver(id(100, 1))
	a.deliver(id(200, 0))
	for _, bad := range []cdc.EventID{{}, id(100, 2), id(150, 0), id(200, 1), id(300, 0), id(50, 0)} {
		if err := a.ack(bad); !errors.Is(err, ErrInvalidAck) {
			t.Errorf("ack %s: err = %v, want ErrInvalidAck", bad, err)
		}
	}
	if err := a.ack(id(100, 1)); err != nil {
		t.Fatal(err)
	}
	if err := a.ack(id(100, 1)); err != nil {
		t.Fatalf("acking the same id again: %v", err)
	}
	if err := a.ack(id(100, 0)); !errors.Is(err, ErrInvalidAck) {
		t.Fatalf("ack lower than an earlier ack: err = %v", err)
	}
	if err := a.ack(id(200, 0)); err != nil {
		t.Fatal(err)
	}
}

func TestNewEventReadsEnvelope(t *testing.T) {
	payload := `{"id":"0/1A2B3C8:0","commit_lsn":"0/1A2B3C8","xid":7412,"commit_time":"2026-11-30T10:00:00.123456Z","schema":"public","table":"orders","op":"update","key":{"id":42},"new":{"id":42,"status":"pa\"id}","total":"19.90","tags":["a","]"]},"old":null,"unchanged":["notes_blob"]}`
	ev, err := newEvent(cdc.Event{ID: id(0x1A2B3C8, 0), Schema: "public", Table: "orders", Op: cdc.OpUpdate, Payload: []byte(payload)})
	if err != nil {
		t.Fatal(err)
	}
	if ev.XID != 7412 || ev.CommitTime.Nanosecond() != 123456000 || string(ev.Key) != `{"id":42}` ||
		string(ev.New) != `{"id":42,"status":"pa\"id}","total":"19.90","tags":["a","]"]}` || ev.Old != nil ||
		len(ev.Unchanged) != 1 || ev.Unchanged[0] != "notes_blob" || string(ev.JSON()) != payload {
		t.Fatalf("event = %+v", ev)
	}
	for _, bad := range []string{``, `{`, `{"xid":}`, `{"new":{"a":1}`, `{"key":"x}`, `[]`} {
		if _, err := newEvent(cdc.Event{Payload: []byte(bad)}); err == nil {
			t.Errorf("newEvent(%q): no error", bad)
		}
	}
}
