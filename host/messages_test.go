package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/walcast/walcast/host"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// TestStreamMessages: with StreamConfig.MessagePrefixes, library mode
// returns application messages as message events (Event.Message): a
// non-transactional one before the transaction that wrote it, with an id
// of its own that acking releases alone; a transactional one as the
// transaction's next change. A reopened stream resumes after the released
// message and replays the unacknowledged transaction under the same ids.
func TestStreamMessages(t *testing.T) {
	dsn, db := setup(t)
	slot := slotName("messages")
	cfg := host.StreamConfig{DSN: dsn, Tables: []string{"public.items"}, Slot: slot, MessagePrefixes: []string{"app."}}
	s := openConfig(t, cfg)
	execT(t, db, `BEGIN; INSERT INTO items VALUES (1, 'a');
		SELECT pg_logical_emit_message(false, 'app.nt', 'not json');
		SELECT pg_logical_emit_message(true, 'other', 'skipped');
		SELECT pg_logical_emit_message(true, 'app.tx', '{"a": 1}'); COMMIT`)
	nt, ins, tx := next(t, s), next(t, s), next(t, s)
	if nt.Op != cdc.OpMessage || nt.Message == nil || nt.Message.Prefix != "app.nt" || nt.Message.Transactional ||
		string(nt.Message.Content) != "not json" || nt.XID != 0 || nt.ID.Index != 0 || nt.Schema != "" || nt.Table != "" {
		t.Fatalf("non-transactional message: %+v %+v (%s)", nt, nt.Message, nt.JSON())
	}
	if ins.Op != cdc.OpInsert || ins.Message != nil {
		t.Fatalf("second event: %+v", ins)
	}
	if tx.Op != cdc.OpMessage || tx.Message == nil || tx.Message.Prefix != "app.tx" || !tx.Message.Transactional ||
		string(tx.Message.Content) != `{"a":1}` || tx.XID != ins.XID || tx.ID.CommitLSN != ins.ID.CommitLSN || tx.ID.Index != 1 {
		t.Fatalf("transactional message: %+v %+v (%s)", tx, tx.Message, tx.JSON())
	}
	if nt.ID.Compare(ins.ID) >= 0 {
		t.Fatalf("the non-transactional message %s does not sort before its transaction %s", nt.ID, ins.ID)
	}
	ack(t, s, nt.ID)
	waitFor(t, "the message to be confirmed", 30*time.Second, func() bool { return confirmed(t, db, slot) > nt.ID.CommitLSN })
	if got := confirmed(t, db, slot); got > ins.ID.CommitLSN {
		t.Fatalf("slot at %s passed the unacked transaction (commit %s)", cdc.FormatLSN(got), cdc.FormatLSN(ins.ID.CommitLSN))
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s = openConfig(t, cfg)
	if again := next(t, s); again.ID != ins.ID {
		t.Fatalf("reopened stream starts with %s (%s), want the unacked insert %s", again.ID, again.Op, ins.ID)
	}
	if again := next(t, s); again.ID != tx.ID || string(again.JSON()) != string(tx.JSON()) {
		t.Fatalf("replayed message %s differs: %s, first %s", again.ID, again.JSON(), tx.JSON())
	}
}
