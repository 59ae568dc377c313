package schedule

import (
	"testing"
	"time"

	"github.com/walcast/walcast/pluginkit"
)

// A partial batch waits for more events only while the sink is busy, and
// never longer than linger after its oldest event; a full batch and a
// batch for an idle sink go at once.
func TestLingerUntil(t *testing.T) {
	now := time.Unix(1000, 0)
	lim := limits{events: 10, bytes: 1 << 20}
	tests := []struct {
		name      string
		pending   int
		oldestAge time.Duration
		inFlight  int
		idleFor   time.Duration
		want      time.Time // zero: now
	}{
		{"full batch while busy", 10, 0, 1, 0, time.Time{}},
		{"idle sink", 1, 0, 0, time.Hour, time.Time{}},
		{"busy: waits", 3, time.Millisecond, 1, 0, now.Add(linger - time.Millisecond)},
		{"busy: waited enough", 3, linger, 1, 0, time.Time{}},
		{"just landed: waits", 3, 0, 0, linger / 2, now.Add(linger)},
		{"just landed, old event", 3, 2 * linger, 0, linger / 2, time.Time{}},
	}
	for _, tt := range tests {
		s := New(Config{BatchSize: 10}, nil, nil, nil)
		for i := range tt.pending {
			e := newEntry(pluginkit.Event{ID: pluginkit.EventID{CommitLSN: 1, Index: uint64(i)}, Schema: "s", Table: "t", Key: []byte(`{"id":1}`)}, nil)
			e.queued = now.Add(-tt.oldestAge)
			s.pending.add(e)
		}
		s.inFlightBatches = tt.inFlight
		s.idleSince = now.Add(-tt.idleFor)
		if got := s.lingerUntil(now, lim); !got.Equal(tt.want) {
			t.Errorf("%s: lingerUntil = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// The table of an entry is the prefix of its row, not a string of its own
// that could differ from it.
func TestEntryTable(t *testing.T) {
	e := newEntry(pluginkit.Event{Schema: "public", Table: "my.t", Op: pluginkit.OpUpdate, Key: []byte(`{"id":1}`)}, nil)
	if e.table != "public.my.t" || e.row != "public.my.t\x1f{\"id\":1}" {
		t.Errorf("table %q, row %q", e.table, e.row)
	}
}
