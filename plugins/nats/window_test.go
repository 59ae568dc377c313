package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/walcast/walcast/pluginkit"
)

// A batch delivered again — by the same sink after a lost ack, or by a
// restarted one — within the duplicate window is recognised by the
// stream: counted as duplicates, stored once.
func TestRedeliveryWithinWindow(t *testing.T) {
	srv := startNATS(t, "")
	s := openSink(t, srv, nil)
	a, b := events(0x100, 50), events(0x200, 30)
	if r := deliver(t, s, pluginkit.Batch{Events: a}); r.Duplicates != 0 {
		t.Errorf("first delivery: %d duplicates", r.Duplicates)
	}
	if r := deliver(t, s, pluginkit.Batch{Events: a}); r.Duplicates != len(a) {
		t.Errorf("same sink, again: %d duplicates, want %d", r.Duplicates, len(a))
	}
	s.Close(t.Context())
	s2 := openSink(t, srv, nil)
	mixed := append(append([]pluginkit.Event{}, a[40:]...), b...)
	if r := deliver(t, s2, pluginkit.Batch{Events: mixed}); r.Duplicates != 10 {
		t.Errorf("restarted sink: %d duplicates, want 10", r.Duplicates)
	}
	assertStored(t, readStream(t, srv.reader(t), "WALCAST"), a, b)
}

// Past the duplicate window the stream no longer knows an id: an event
// delivered again then is stored a second time, with the same
// Nats-Msg-Id and the same bytes (what docs/sinks.md says).
func TestRedeliveryPastWindow(t *testing.T) {
	srv := startNATS(t, "")
	s := openSink(t, srv, map[string]any{"duplicate_window": "1s", "min_duplicate_window": "1s"})
	a := events(0x100, 5)
	deliver(t, s, pluginkit.Batch{Events: a})
	deadline := time.Now().Add(30 * time.Second)
	var r pluginkit.DeliverResult
	for {
		time.Sleep(500 * time.Millisecond) // the server forgets ids some time after the window
		if r = deliver(t, s, pluginkit.Batch{Events: a[:1]}); r.Duplicates == 0 || time.Now().After(deadline) {
			break
		}
	}
	if r.Duplicates != 0 {
		t.Fatal("the stream still recognised the id 30 s after a 1 s window")
	}
	got := readStream(t, srv.reader(t), "WALCAST")
	assertStored(t, got[:5], a)
	if len(got) != 6 || got[5] != got[0] {
		t.Fatalf("after the window: %d messages, the last %+v, want a second copy of %+v", len(got), got[len(got)-1], got[0])
	}
}

// A parked event replayed is stored; one the stream already holds (it was
// stored although its ack never came) is not stored again, and is not
// reported as a duplicate, which would keep it parked.
func TestReplay(t *testing.T) {
	srv := startNATS(t, "")
	s := openSink(t, srv, nil)
	stored, parked := events(0x100, 3), events(0x200, 2)
	deliver(t, s, pluginkit.Batch{Events: stored})
	replay := append(append([]pluginkit.Event{}, stored[2]), parked...)
	if r := deliver(t, s, pluginkit.Batch{Events: replay, Replay: true}); r.Duplicates != 0 {
		t.Errorf("replay reported %d duplicates, want 0", r.Duplicates)
	}
	assertStored(t, readStream(t, srv.reader(t), "WALCAST"), stored, parked)
}

// Open refuses a stream whose window is shorter than min_duplicate_window,
// saying what to change.
func TestWindowTooShort(t *testing.T) {
	srv := startNATS(t, "")
	js := srv.reader(t)
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "WALCAST", Subjects: []string{"walcast.>"}, Duplicates: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	_, err := configureOpen(t, newSink(discardLogger()), srv.url(), nil)
	if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindPermanent || !strings.Contains(err.Error(), "30s") || !strings.Contains(err.Error(), "--dupe-window 2m0s") {
		t.Fatalf("Open = %v (%s), want permanent naming the window and the fix", err, kind)
	}
	// Accepted when the user accepts it.
	if _, err := configureOpen(t, newSink(discardLogger()), srv.url(), map[string]any{"min_duplicate_window": "30s"}); err != nil {
		t.Fatalf("Open with min_duplicate_window = 30s: %v", err)
	}
}

// The stream is created when missing (window, subjects), and without
// create_stream Open says how to create it; a table whose subject the
// stream does not store is refused.
func TestStreamCreation(t *testing.T) {
	srv := startNATS(t, "")
	_, err := configureOpen(t, newSink(discardLogger()), srv.url(), map[string]any{"create_stream": false})
	if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindPermanent || !strings.Contains(err.Error(), "nats stream add WALCAST") {
		t.Fatalf("Open without the stream = %v (%s), want permanent with how to create it", err, kind)
	}
	openSink(t, srv, map[string]any{"duplicate_window": "5m", "subjects": map[string]string{"public.x": "other.x"}}, "public.items", "public.x")
	st, err := srv.reader(t).Stream(t.Context(), "WALCAST")
	if err != nil {
		t.Fatal(err)
	}
	if c := st.CachedInfo().Config; c.Duplicates != 5*time.Minute || strings.Join(c.Subjects, " ") != "walcast.> other.x" {
		t.Errorf("created stream: window %s, subjects %v", c.Duplicates, c.Subjects)
	}
	_, err = configureOpen(t, newSink(discardLogger()), srv.url(), map[string]any{"subjects": map[string]string{"public.y": "elsewhere.y"}}, "public.y")
	if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindPermanent || !strings.Contains(err.Error(), "does not store subject elsewhere.y") {
		t.Fatalf("Open with a subject outside the stream = %v (%s)", err, kind)
	}
}

// An event larger than the stream's max_msg_size is refused by the
// stream: named permanent, the others stored once.
func TestMaxMsgSize(t *testing.T) {
	srv := startNATS(t, "")
	js := srv.reader(t)
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "WALCAST", Subjects: []string{"walcast.>"}, Duplicates: 2 * time.Minute, MaxMsgSize: 1024}); err != nil {
		t.Fatal(err)
	}
	s := openSink(t, srv, nil)
	batch := events(0x100, 5)
	batch[3].Payload = []byte(`{"pad":"` + strings.Repeat("x", 2048) + `"}`)
	_, err := s.Deliver(t.Context(), pluginkit.Batch{Events: batch})
	var be *pluginkit.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 1 || be.Failed[3] == nil {
		t.Fatalf("Deliver = %v, want a BatchError naming event 3", err)
	}
	if kind, _ := pluginkit.KindOf(be.Failed[3]); kind != pluginkit.KindPermanent || !strings.Contains(be.Failed[3].Error(), "max_msg_size") || !strings.Contains(be.Failed[3].Error(), "0/100:3") {
		t.Errorf("event 3: %v (%s), want permanent naming the event and max_msg_size", be.Failed[3], kind)
	}
	assertStored(t, readStream(t, js, "WALCAST"), batch[:3], batch[4:])
}

// Waiting for acks ends with the context, retryably.
func TestAckWaitEndsWithContext(t *testing.T) {
	srv := startNATS(t, "")
	s := openSink(t, srv, nil)
	resume := srv.Pause()
	defer resume()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := s.Deliver(ctx, pluginkit.Batch{Events: events(0x100, 3)})
	if kind, _ := pluginkit.KindOf(err); kind != pluginkit.KindRetryable || time.Since(start) > 3*time.Second {
		t.Fatalf("Deliver to a paused server = %v (%s) after %s", err, kind, time.Since(start))
	}
}

// TestNewEpochIsNotADuplicate: after a failover or a healed gap the new
// slot's ids start again below the old ones, and one may equal an id the
// stream saw within its window. The Nats-Msg-Id carries the ids' epoch,
// so such an event is stored; within one epoch a redelivery is still a
// duplicate.
func TestNewEpochIsNotADuplicate(t *testing.T) {
	srv := startNATS(t, "")
	s := openSink(t, srv, nil)
	a := events(0x100, 20)
	if r := deliver(t, s, pluginkit.Batch{Events: a, Epoch: "7:0/10@1"}); r.Duplicates != 0 {
		t.Errorf("first delivery: %d duplicates", r.Duplicates)
	}
	if r := deliver(t, s, pluginkit.Batch{Events: a, Epoch: "7:0/10@1"}); r.Duplicates != len(a) {
		t.Errorf("same epoch, again: %d duplicates, want %d", r.Duplicates, len(a))
	}
	again := events(0x100, 20) // the new primary's events, the same ids
	if r := deliver(t, s, pluginkit.Batch{Events: again, Epoch: "8:0/10@2"}); r.Duplicates != 0 {
		t.Errorf("new epoch: %d of %d events dropped as duplicates", r.Duplicates, len(again))
	}
	got := readStream(t, srv.reader(t), "WALCAST")
	if len(got) != 2*len(a) {
		t.Fatalf("the stream holds %d messages, want %d", len(got), 2*len(a))
	}
	if got[0].ID != "7:0/10@1/"+a[0].ID.String() || got[len(a)].ID != "8:0/10@2/"+a[0].ID.String() {
		t.Errorf("message ids %q and %q", got[0].ID, got[len(a)].ID)
	}
}
