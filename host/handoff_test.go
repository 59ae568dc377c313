package host

import (
	"context"
	"testing"
	"time"

	"github.com/walcast/walcast/host/internal/change"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// A waiting Next is woken by a commit even when fewer than wakeBatch
// events wait, and gets them all, in order.
func TestHandoffCommitWakesNext(t *testing.T) {
	h := newHandoff(1024)
	got := make(chan []change.Event)
	go func() {
		evs, err := h.take(context.Background(), nil)
		if err != nil {
			t.Error(err)
		}
		got <- evs
	}()
	waitUntil(t, func() bool { h.mu.Lock(); defer h.mu.Unlock(); return h.waiting })
	for i := range uint64(3) {
		if err := h.put(context.Background(), change.Event{Event: cdc.Event{ID: id(100, i)}}, func() {}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case evs := <-got:
		t.Fatalf("Next woken before the commit with %d events", len(evs))
	case <-time.After(20 * time.Millisecond):
	}
	h.flush()
	select {
	case evs := <-got:
		if len(evs) != 3 || evs[0].ID != id(100, 0) || evs[2].ID != id(100, 2) {
			t.Fatalf("took %v", evs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a commit did not wake Next")
	}
}

// A full handoff blocks capture, which keeps calling idle, until Next
// takes the events; the total read ahead stays within the buffer.
func TestHandoffFullBlocksCapture(t *testing.T) {
	h := newHandoff(4) // two events per side
	ctx := context.Background()
	for i := range uint64(2) {
		if err := h.put(ctx, change.Event{Event: cdc.Event{ID: id(100, i)}}, func() {}); err != nil {
			t.Fatal(err)
		}
	}
	idled := make(chan struct{}, 1)
	put := make(chan error)
	go func() { put <- h.put(ctx, change.Event{Event: cdc.Event{ID: id(100, 2)}}, func() { notify(idled) }) }()
	select {
	case <-idled:
	case err := <-put:
		t.Fatalf("put into a full handoff returned %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("capture blocked without calling idle")
	}
	evs, err := h.take(ctx, nil)
	if err != nil || len(evs) != 2 {
		t.Fatalf("took %d events, %v", len(evs), err)
	}
	if err := <-put; err != nil {
		t.Fatal(err)
	}
	h.end()
	evs, _ = h.take(ctx, evs)
	if len(evs) != 1 || evs[0].ID != id(100, 2) {
		t.Fatalf("took %v after the end", evs)
	}
	if evs, _ = h.take(ctx, evs); len(evs) != 0 {
		t.Fatalf("took %v after everything", evs)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}
