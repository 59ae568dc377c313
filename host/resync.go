package host

import (
	"github.com/walcast/walcast/pluginkit/cdc"
)

// ResyncTracker keeps the bookkeeping of the resync marker contract
// (docs/guarantees.md, "Resync: the marker contract") for a consumer that
// keeps a copy of tables in a store of its own: which rows of each table
// were seen since the table's resync_begin. Pass it every event, in the
// order Next returns them, with Observe; at a resync_end Observe returns
// a Sweep, and the consumer removes from its copy of that table every row
// the Sweep did not see. Redeliveries are fine (an event seen twice is
// seen), and so is a redelivered begin or end of the same resync. The
// tracker lives in memory: a consumer that restarts in the middle of a
// resync gets the resync_begin again from the stream only if it had not
// acknowledged it; one that had should resync the table again. It is not
// safe for concurrent use.
type ResyncTracker struct {
	open  map[string]*resyncState // "schema.table" → the resync under way
	ended map[int64]bool
}

type resyncState struct {
	id    int64
	begin cdc.EventID
	seen  map[string]struct{}
}

// Sweep is a resync that ended: the rows of its table the consumer's copy
// holds and Seen says were not seen are rows the source no longer has.
type Sweep struct {
	Schema, Table string
	Resync        int64
	seen          map[string]struct{}
}

// Seen reports whether the row with key (the Key of its events, as the
// stream gave it: the same bytes for the same row) was seen since the
// resync began.
func (s *Sweep) Seen(key []byte) bool {
	_, ok := s.seen[string(key)]
	return ok
}

// Observe records ev. It returns a Sweep when ev ends a resync the
// tracker saw begin, nil otherwise.
func (r *ResyncTracker) Observe(ev *Event) *Sweep {
	if r.open == nil {
		r.open, r.ended = map[string]*resyncState{}, map[int64]bool{}
	}
	table := ev.Schema + "." + ev.Table
	st := r.open[table]
	switch ev.Op {
	case cdc.OpResyncBegin:
		if !r.ended[ev.Resync] && (st == nil || st.id != ev.Resync) {
			// A later resync of the table replaces one that never ended
			// (it was cancelled).
			r.open[table] = &resyncState{id: ev.Resync, begin: ev.ID, seen: map[string]struct{}{}}
		}
		return nil
	case cdc.OpResyncEnd:
		if st == nil || st.id != ev.Resync {
			return nil
		}
		delete(r.open, table)
		r.ended[ev.Resync] = true
		return &Sweep{Schema: ev.Schema, Table: ev.Table, Resync: ev.Resync, seen: st.seen}
	}
	if st != nil && ev.Key != nil && ev.ID.Compare(st.begin) > 0 {
		st.seen[string(ev.Key)] = struct{}{}
	}
	return nil
}
