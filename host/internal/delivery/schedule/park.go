package schedule

import (
	"context"
	"slices"
	"time"

	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/delivery/ack"
)

// Parking writes to the control plane on the scheduler's own loop, on
// purpose: an event is resolved only once its park record is durable, so
// while the database is unreachable this sink's loop waits in retryStore
// (each try bounded to 30 s, all of them by ctx) and makes no progress —
// which is the truth: it cannot move its watermark. Every other sink has a
// loop of its own and goes on.

// park writes events to walcast.parked and resolves them. An event is
// parked under its row and, for an update that changed the key, under the
// old row too; a truncate under its table's truncate row. What must go
// after a parked event (see "Parking and replay" in the package doc) is
// parked behind it until a replay clears them: later events of its rows,
// later events of its table if it is a truncate, and its table's later
// truncates. failed says es just failed: the pending events that must go
// after them are then parked behind them (and what must go after those, in
// turn), and the replay of their rows stops. An event parked on arrival
// has nothing pending behind it.
func (s *Scheduler) park(ctx context.Context, es []*entry, reason string, failed bool) error {
	rows := map[string]bool{}
	note := func(e *entry) {
		rows[e.row] = true
		if e.oldRow != "" {
			rows[e.oldRow] = true
		}
	}
	for _, e := range es {
		note(e)
	}
	all := slices.Clone(es)
	if failed {
		for _, e := range s.pending.removeBehind(es) {
			note(e)
			if e.replay {
				// Still in walcast.parked: the next replay loads it again.
				delete(s.replayIDs, e.ev.ID)
				continue
			}
			all = append(all, e)
		}
		for _, e := range es {
			delete(s.replayIDs, e.ev.ID)
		}
	}
	var ended []string
	for r := range rows {
		s.parked.add(r)
		if failed && s.replaying[r] {
			ended = append(ended, r)
		}
	}
	now := time.Now()
	recs := make([]parking.Event, 0, len(all))
	for _, e := range all {
		p := parking.Event{Sink: s.cfg.SinkID, Event: e.ev, Row: e.row, OldRow: e.oldRow, Attempts: e.attempts,
			LastError: e.lastErr, FirstFailure: e.firstFail, LastFailure: now}
		if p.LastError == "" {
			p.LastError = reason
			if p.LastError == "" {
				p.LastError = behindReason(e)
			}
		}
		if p.FirstFailure.IsZero() {
			p.FirstFailure = now
		}
		recs = append(recs, p)
	}
	if err := retryStore(ctx, s.log, func(ctx context.Context) error { return s.cfg.Parked.Park(ctx, recs) }); err != nil {
		return err
	}
	// Only now has a replayed row that failed again "left replay, parked
	// again" (ReplayWait): its waiters read walcast.parked next.
	for _, r := range ended {
		s.endReplay(r)
	}
	seqs := make([]ack.Seq, 0, len(all))
	for _, e := range all {
		if !e.replay {
			seqs = append(seqs, e.seq)
		}
	}
	s.tracker.Resolve(s.cfg.Index, seqs...)
	s.Stats.Parked.Add(int64(len(all)))
	if es[0].attempts > 0 {
		s.log.Error("event parked after failed attempts", "event", es[0].ev.ID.String(), "table", es[0].ev.Schema+"."+es[0].ev.Table,
			"attempts", es[0].attempts, "parked_behind", len(all)-len(es), "err", es[0].lastErr)
	}
	return nil
}

// parkedBehind returns why an arriving event must be parked behind an
// event already parked, "" when it may go: an earlier event of one of its
// rows is parked, or a truncate of its table is, or (for a truncate) any
// earlier event of its table is.
func (s *Scheduler) parkedBehind(e *entry) string {
	switch {
	case s.parked.has(e.row):
		return "parked behind an earlier parked event of the same row"
	case e.oldRow != "" && s.parked.has(e.oldRow):
		return "parked behind an earlier parked event of the row whose key this update changed"
	case s.parked.truncated(e.table):
		return "parked behind a parked truncate of the same table"
	case e.barrier && s.parked.tableHas(e.table):
		return "truncate parked behind earlier parked events of its table: it may only follow them"
	}
	return ""
}

// behindReason is the last error recorded for an event parked behind one
// that failed while it was pending.
func behindReason(e *entry) string {
	if e.barrier {
		return "truncate parked behind an earlier event of its table that was parked"
	}
	return "parked behind an earlier parked event of the same row or a parked truncate of its table"
}

// parkedSet is the rows of a sink with events in walcast.parked, with, per
// table, how many of them it has: a truncate of a table with any parked
// row parks behind them, and a table whose truncate row is parked parks
// every later event behind it.
type parkedSet struct {
	rows   map[string]bool
	tables map[string]int
}

func newParkedSet() parkedSet {
	return parkedSet{rows: map[string]bool{}, tables: map[string]int{}}
}

func (p parkedSet) has(row string) bool { return p.rows[row] }

func (p parkedSet) add(row string) {
	if !p.rows[row] {
		p.rows[row] = true
		p.tables[tableOf(row)]++
	}
}

func (p parkedSet) remove(row string) {
	if p.rows[row] {
		delete(p.rows, row)
		t := tableOf(row)
		if p.tables[t]--; p.tables[t] <= 0 {
			delete(p.tables, t)
		}
	}
}

// tableHas reports whether table has any parked row.
func (p parkedSet) tableHas(table string) bool { return p.tables[table] > 0 }

// truncated reports whether a truncate of table is parked.
func (p parkedSet) truncated(table string) bool { return p.rows[table+"\x1f"+tableKey] }
