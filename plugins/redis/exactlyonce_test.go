package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

const itemsStream = "walcast:public.items"

// A reopened sink reports the last id written, and a redelivered batch
// (the host crashed between EXEC and recording the ack) is filtered and
// counted, in part or in whole.
func TestExactlyOnceAcrossReopen(t *testing.T) {
	srv := startRedis(t)
	s, res := openSink(t, srv.Addr, nil)
	if !res.Checkpoint.IsZero() {
		t.Fatalf("fresh Open checkpoint = %s, want zero", res.Checkpoint)
	}
	a, b := events(0x100, 50), events(0x200, 30)
	for _, batch := range [][]pluginkit.Event{a, b} {
		if r := deliver(t, s, pluginkit.Batch{Events: batch}); r.Duplicates != 0 {
			t.Errorf("first delivery: %d duplicates", r.Duplicates)
		}
	}
	s.Close(t.Context())

	s2, res := openSink(t, srv.Addr, nil)
	if want := b[len(b)-1].ID; res.Checkpoint != want {
		t.Fatalf("reopened checkpoint = %s, want %s", res.Checkpoint, want)
	}
	c := events(0x300, 10)
	if r := deliver(t, s2, pluginkit.Batch{Events: b}); r.Duplicates != len(b) {
		t.Errorf("redelivered batch: %d duplicates, want %d", r.Duplicates, len(b))
	}
	mixed := append(append([]pluginkit.Event{}, b[20:]...), c...)
	if r := deliver(t, s2, pluginkit.Batch{Events: mixed}); r.Duplicates != 10 {
		t.Errorf("half-redelivered batch: %d duplicates, want 10", r.Duplicates)
	}
	assertOnce(t, entries(t, srv.client(t, ""), itemsStream), a, b, c)
}

// A replay batch (parked events an operator asked for again) lies below
// the checkpoint and is written all the same, without moving it back.
func TestReplayBelowCheckpoint(t *testing.T) {
	srv := startRedis(t)
	s, _ := openSink(t, srv.Addr, nil)
	parked, later := events(0x100, 3), events(0x200, 5)
	deliver(t, s, pluginkit.Batch{Events: later})
	if r := deliver(t, s, pluginkit.Batch{Events: parked, Replay: true}); r.Duplicates != 0 {
		t.Errorf("replay reported %d duplicates, want 0 (the host would keep them parked)", r.Duplicates)
	}
	s.Close(t.Context())
	_, res := openSink(t, srv.Addr, nil)
	if want := later[len(later)-1].ID; res.Checkpoint != want {
		t.Errorf("checkpoint after the replay = %s, want %s (never back)", res.Checkpoint, want)
	}
	assertOnce(t, entries(t, srv.client(t, ""), itemsStream), later, parked)
}

// A transaction whose answer never came back is settled by the claim
// before the next write: here EXEC ran after the client gave up, so the
// retried batch is recognised as written.
func TestUnknownOutcomeSettled(t *testing.T) {
	srv := startRedis(t)
	s, _ := openSink(t, srv.Addr, nil)
	batch := events(0x100, 20)
	var resume func()
	s.beforeExec = func(context.Context) error {
		resume = srv.Pause() // the transaction waits in the socket
		return nil
	}
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	_, err := s.Deliver(ctx, pluginkit.Batch{Events: batch})
	cancel()
	if kind, _ := pluginkit.KindOf(err); err == nil || kind != pluginkit.KindRetryable {
		t.Fatalf("Deliver to a paused server = %v (%s), want a retryable error", err, kind)
	}
	s.beforeExec = nil
	resume() // the server now runs the transaction the client gave up on
	if r := deliver(t, s, pluginkit.Batch{Events: batch}); r.Duplicates != len(batch) {
		t.Errorf("retry found %d duplicates, want %d: the first EXEC ran", r.Duplicates, len(batch))
	}
	assertOnce(t, entries(t, srv.client(t, ""), itemsStream), batch)
}

// A second sink claiming the same checkpoint key fences the first, also
// between its epoch check and its EXEC: the first never writes again.
func TestFencing(t *testing.T) {
	srv := startRedis(t)
	s1, _ := openSink(t, srv.Addr, nil)
	deliver(t, s1, pluginkit.Batch{Events: events(0x100, 2)})
	var s2 *Sink
	s1.beforeExec = func(context.Context) error {
		s2, _ = openSink(t, srv.Addr, nil)
		return nil
	}
	_, err := s1.Deliver(t.Context(), pluginkit.Batch{Events: events(0x200, 2)})
	if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindFatal || !strings.Contains(err.Error(), "fenced") {
		t.Fatalf("Deliver of a fenced sink = %v (%s), want fatal", err, kind)
	}
	s1.beforeExec = nil
	if _, err := s1.Deliver(t.Context(), pluginkit.Batch{Events: events(0x300, 1)}); err == nil {
		t.Fatal("a fenced sink delivered again")
	}
	next := events(0x200, 2)
	deliver(t, s2, pluginkit.Batch{Events: next})
	assertOnce(t, entries(t, srv.client(t, ""), itemsStream), events(0x100, 2), next)
}

// An event larger than the server takes is named permanent before it is
// sent; the rest of the batch is written once.
func TestTooLargeIsNamed(t *testing.T) {
	srv := startRedis(t, "--proto-max-bulk-len", "1mb")
	s, _ := openSink(t, srv.Addr, nil)
	batch := events(0x100, 5)
	batch[2].Payload = []byte(`{"pad":"` + strings.Repeat("x", 2<<20) + `"}`)
	_, err := s.Deliver(t.Context(), pluginkit.Batch{Events: batch})
	var be *pluginkit.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 1 || be.Failed[2] == nil {
		t.Fatalf("Deliver = %v, want a BatchError naming event 2", err)
	}
	if kind, _ := pluginkit.KindOf(be.Failed[2]); kind != pluginkit.KindPermanent || !strings.Contains(be.Failed[2].Error(), "0/100:2") || !strings.Contains(be.Failed[2].Error(), "proto-max-bulk-len") {
		t.Errorf("event 2's error %q is %s, want permanent, naming the event and the limit", be.Failed[2], kind)
	}
	good := append(append([]pluginkit.Event{}, batch[:2]...), batch[3:]...)
	assertOnce(t, entries(t, srv.client(t, ""), itemsStream), good)
}

// A stream key that holds another type makes that event's XADD fail when
// EXEC runs: it is named permanent, the others are written, and the
// checkpoint moves (the host parks the event; a replay writes it).
func TestWrongTypeIsNamed(t *testing.T) {
	srv := startRedis(t)
	c := srv.client(t, "")
	if err := c.Set(t.Context(), "walcast:public.other", "a string", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s, _ := openSink(t, srv.Addr, nil)
	batch := events(0x100, 4)
	batch[1].Table = "other"
	_, err := s.Deliver(t.Context(), pluginkit.Batch{Events: batch})
	var be *pluginkit.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 1 || be.Failed[1] == nil || !strings.Contains(be.Failed[1].Error(), "WRONGTYPE") {
		t.Fatalf("Deliver = %v, want a BatchError naming event 1 with WRONGTYPE", err)
	}
	if kind, _ := pluginkit.KindOf(be.Failed[1]); kind != pluginkit.KindPermanent {
		t.Errorf("event 1 is %s, want permanent", kind)
	}
	assertOnce(t, entries(t, c, itemsStream), []pluginkit.Event{batch[0], batch[2], batch[3]})
	c.Del(t.Context(), "walcast:public.other")
	if r := deliver(t, s, pluginkit.Batch{Events: batch[1:2], Replay: true}); r.Duplicates != 0 {
		t.Errorf("replay: %d duplicates", r.Duplicates)
	}
	if got := entries(t, c, "walcast:public.other"); len(got) != 1 {
		t.Errorf("the replayed event: %d entries", len(got))
	}
}

func TestMaxLen(t *testing.T) {
	srv := startRedis(t)
	s, _ := openSink(t, srv.Addr, map[string]any{"maxlen": 10, "maxlen_exact": true})
	all := events(0x100, 50)
	deliver(t, s, pluginkit.Batch{Events: all[:25]})
	deliver(t, s, pluginkit.Batch{Events: all[25:]})
	assertOnce(t, entries(t, srv.client(t, ""), itemsStream), all[40:])
}

// deliverIn delivers evs as a batch of epoch (a replay batch if replay).
func deliverIn(t *testing.T, s *Sink, epoch string, replay bool, evs []pluginkit.Event) int {
	t.Helper()
	return deliver(t, s, pluginkit.Batch{Events: evs, Epoch: epoch, Replay: replay}).Duplicates
}

// TestNewEpochIsWrittenBelowCheckpoint: after a failover the new
// primary's ids can be lower than the checkpoint (pluginkit.Batch.Epoch).
// A checkpoint an older sink left (no id_epoch field) filters as before
// and adopts the first epoch it meets; a batch of a new epoch is written
// whole and moves the checkpoint down, with its epoch, in its MULTI/EXEC:
// a reopened sink reports both and skips that batch's redelivery, also
// from a host without epochs. A replay of parked events of the old epoch,
// above the new checkpoint, moves neither, so the new epoch's next batch
// is not taken for a duplicate.
func TestNewEpochIsWrittenBelowCheckpoint(t *testing.T) {
	srv := startRedis(t)
	c := srv.client(t, "")
	// As an older sink left it: a fencing epoch and an id, no id_epoch.
	if err := c.HSet(t.Context(), "walcast:checkpoint:p:r", "epoch", 7, "id", "0/300:4").Err(); err != nil {
		t.Fatal(err)
	}
	s, res := openSink(t, srv.Addr, nil)
	if res.Epoch != "" || res.Checkpoint != (pluginkit.EventID{CommitLSN: 0x300, Index: 4}) {
		t.Fatalf("Open on an older sink's checkpoint reported %s of epoch %q, want 0/300:4 of no epoch", res.Checkpoint, res.Epoch)
	}
	if d := deliverIn(t, s, "A", false, events(0x200, 5)); d != 5 {
		t.Fatalf("epoch A below a checkpoint of no epoch: %d duplicates, want 5 (it is adopted, not distrusted)", d)
	}
	deliverIn(t, s, "A", false, events(0x400, 5))
	s.Close(t.Context())

	// The failover: epoch B's ids are lower than A's checkpoint.
	s, res = openSink(t, srv.Addr, nil)
	if res.Epoch != "A" || res.Checkpoint != (pluginkit.EventID{CommitLSN: 0x400, Index: 4}) {
		t.Fatalf("Open reported %s of epoch %q, want 0/400:4 of epoch A", res.Checkpoint, res.Epoch)
	}
	if d := deliverIn(t, s, "B", false, events(0x100, 5)); d != 0 {
		t.Fatalf("the first batch of epoch B, below A's checkpoint: %d duplicates, want none", d)
	}
	s.Close(t.Context())

	s, res = openSink(t, srv.Addr, nil)
	if res.Epoch != "B" || res.Checkpoint != (pluginkit.EventID{CommitLSN: 0x100, Index: 4}) {
		t.Fatalf("Open after epoch B's first batch reported %s of epoch %q, want 0/100:4 of epoch B", res.Checkpoint, res.Epoch)
	}
	if d := deliverIn(t, s, "B", false, events(0x100, 5)); d != 5 {
		t.Fatalf("epoch B's first batch again: %d duplicates, want 5", d)
	}
	if d := deliverIn(t, s, "", false, events(0x100, 5)); d != 5 {
		t.Fatalf("the same batch from a host without epochs: %d duplicates, want 5", d)
	}
	parked := events(0x380, 2) // parked in epoch A, replayed in B
	if d := deliverIn(t, s, "B", true, parked); d != 0 {
		t.Fatalf("replay: %d duplicates, want 0", d)
	}
	if d := deliverIn(t, s, "B", false, events(0x180, 5)); d != 0 {
		t.Fatalf("epoch B's next batch after a replay of higher ids: %d duplicates, want none (a replay must not move the checkpoint)", d)
	}
	got, err := c.HMGet(t.Context(), "walcast:checkpoint:p:r", "id", "id_epoch").Result()
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != "0/180:4" || got[1] != "B" {
		t.Errorf("checkpoint key holds id %v, id_epoch %v; want 0/180:4 and B", got[0], got[1])
	}
	assertOnce(t, entries(t, c, itemsStream), events(0x400, 5), events(0x100, 5), parked, events(0x180, 5))
}

// With a route each event goes to the stream "<stream_prefix>:<route>":
// events routed to two streams arrive in each, every row's entries in
// commit order, and the one checkpoint written in the same MULTI/EXEC
// keeps a redelivery after a reopen out of both streams. A route naming
// the checkpoint key parks its event alone.
func TestRoutesExactlyOnce(t *testing.T) {
	srv := startRedis(t)
	extra := map[string]any{"stream_prefix": "cdc", "checkpoint_key": "cdc:cp"}
	s, _ := openSink(t, srv.Addr, extra)
	if !s.Info().Routes {
		t.Fatal("Info.Routes is false: the host would refuse a route on the redis sink")
	}
	route := func(evs []pluginkit.Event) []pluginkit.Event {
		for i := range evs {
			// events' keys are {"id":i%7}: odd keys to one stream, even to the other.
			evs[i].Route = map[bool]string{true: "tenant:us", false: "tenant:eu"}[strings.Contains("135", string(evs[i].Key[6]))]
		}
		return evs
	}
	a, b := route(events(0x100, 40)), route(events(0x200, 40))
	deliver(t, s, pluginkit.Batch{Events: a})
	s.Close(t.Context())

	s2, res := openSink(t, srv.Addr, extra)
	if want := a[len(a)-1].ID; res.Checkpoint != want {
		t.Fatalf("reopened checkpoint = %s, want %s", res.Checkpoint, want)
	}
	// The host redelivers a (its ack was lost) together with b.
	if r := deliver(t, s2, pluginkit.Batch{Events: a}); r.Duplicates != len(a) {
		t.Errorf("redelivered batch: %d duplicates, want %d", r.Duplicates, len(a))
	}
	b[5].Route = "cp" // the stream key would be the checkpoint key
	_, err := s2.Deliver(t.Context(), pluginkit.Batch{Events: b})
	var be *pluginkit.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 1 || be.Failed[5] == nil || !strings.Contains(be.Failed[5].Error(), `route "cp"`) {
		t.Fatalf("Deliver with a route on the checkpoint key = %v, want a BatchError naming event 5 and its route", err)
	}

	c := srv.client(t, "")
	want := map[string][]string{}
	for _, e := range append(a, b...) {
		if e.Route != "cp" {
			want["cdc:"+e.Route] = append(want["cdc:"+e.Route], e.ID.String())
		}
	}
	for stream, w := range want {
		if got := ids(entries(t, c, stream)); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("stream %s holds %v, want %v", stream, got, w)
		}
	}
	if len(want) != 2 {
		t.Fatalf("routed to %d streams, want 2", len(want))
	}
}
