package pluginkit

import (
	"context"
	"reflect"
	"testing"
)

// What a BatchSink receives as values reaches a Sink through the context
// of the same call, and nothing else does.
func TestLegacySinkReadsTheContext(t *testing.T) {
	bare := context.Background()
	if IdentityFrom(bare) != (Identity{}) || TablesFrom(bare) != nil || IsReplay(bare) || GapBefore(bare) || EpochOf(bare) != "" {
		t.Fatal("a bare context carries something")
	}
	rec := &recordingSink{}
	s := legacySink{rec}
	setup := Setup{Config: []byte(`{"a":1}`), Sink: Identity{Pipeline: "shop", SinkID: "billing"}, Tables: []string{"public.orders"}}
	if err := s.Configure(bare, setup); err != nil {
		t.Fatal(err)
	}
	if rec.identity != setup.Sink || !reflect.DeepEqual(rec.tables, setup.Tables) || string(rec.config) != `{"a":1}` {
		t.Errorf("Configure saw %+v %v %s, want %+v", rec.identity, rec.tables, rec.config, setup)
	}
	for _, b := range []Batch{{Replay: true}, {GapBefore: true}, {Epoch: "e2"}, {}} {
		if _, err := s.Deliver(bare, b); err != nil {
			t.Fatal(err)
		}
		if rec.replay != b.Replay || rec.gap != b.GapBefore || rec.epoch != b.Epoch {
			t.Errorf("Deliver of %+v saw replay %v, gap %v, epoch %q", b, rec.replay, rec.gap, rec.epoch)
		}
	}
}
