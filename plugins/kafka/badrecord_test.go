package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walcast/walcast/pluginkit"
)

// A record the cluster refuses on its own (over max_message_bytes) is
// named in a BatchError as permanent, while the other events of its batch
// are written once, with eos (one transaction without it) and without.
func TestBadRecordIsNamed(t *testing.T) {
	for _, eos := range []bool{true, false} {
		t.Run(map[bool]string{true: "eos", false: "no-eos"}[eos], func(t *testing.T) {
			_, addr := broker(t)
			cfg := map[string]any{"max_message_bytes": 2048, "eos": eos}
			if eos {
				cfg["transactional_id"] = "walcast-bad"
			}
			s, _ := openSink(t, addr, cfg)
			batch := events(0x100, 5)
			batch[2].Payload = []byte(`{"pad":"` + strings.Repeat("x", 4096) + `"}`)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			_, err := s.Deliver(ctx, pluginkit.Batch{Events: batch})
			var be *pluginkit.BatchError
			if !errors.As(err, &be) || len(be.Failed) != 1 || be.Failed[2] == nil {
				t.Fatalf("Deliver = %v, want a BatchError naming event 2 alone", err)
			}
			if kind, _ := pluginkit.KindOf(be.Failed[2]); kind != pluginkit.KindPermanent || !strings.Contains(be.Failed[2].Error(), "0/100:2") {
				t.Errorf("event 2's error %q is %s, want permanent and naming the event", be.Failed[2], kind)
			}
			good := append(append([]pluginkit.Event{}, batch[:2]...), batch[3:]...)
			assertOnce(t, read(t, addr, "walcast.public.items", kgo.ReadCommitted()), good)
			// The sink goes on with the next batch.
			next := events(0x200, 2)
			deliver(t, s, next)
			assertOnce(t, read(t, addr, "walcast.public.items", kgo.ReadCommitted()), append(good, next...))
		})
	}
}

// A batch whose every event is refused fails as a whole.
func TestEveryRecordRefusedFailsTheBatch(t *testing.T) {
	_, addr := broker(t)
	s, _ := openSink(t, addr, map[string]any{"transactional_id": "walcast-allbad", "max_message_bytes": 2048})
	batch := events(0x100, 2)
	for i := range batch {
		batch[i].Payload = []byte(`{"pad":"` + strings.Repeat("x", 4096) + `"}`)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := s.Deliver(ctx, pluginkit.Batch{Events: batch})
	var be *pluginkit.BatchError
	if kind, _ := pluginkit.KindOf(err); errors.As(err, &be) || kind != pluginkit.KindPermanent {
		t.Fatalf("Deliver = %v (%s), want a permanent error of the batch", err, kind)
	}
}
