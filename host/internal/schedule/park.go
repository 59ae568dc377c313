package schedule

import (
	"context"
	"slices"
	"time"

	"github.com/walcast/walcast/host/internal/ack"
	"github.com/walcast/walcast/host/internal/checkpoint"
)

// Parking writes to the control plane on the scheduler's own loop, on
// purpose: an event is resolved only once its park record is durable, so
// while the database is unreachable this sink's loop waits in retryStore
// (each try bounded to 30 s, all of them by ctx) and makes no progress —
// which is the truth: it cannot move its watermark. Every other sink has a
// loop of its own and goes on.

// park writes events to walcast.parked and resolves them. An event is
// parked under its row and, for an update that changed the key, under the
// old row too; every later event of those rows is parked behind it until a
// replay clears them. A truncate is parked under its table's row, and every
// later event of the table is parked behind it. failed says es just failed:
// the pending events of their rows (and of the rows a key change among
// those brings in) and, for a truncate, of its table are then parked behind
// them, and the replay of those rows stops. An event parked on arrival has
// nothing pending behind it.
func (s *Scheduler) park(ctx context.Context, es []*entry, reason string, failed bool) error {
	rows := map[string]bool{}
	tables := map[string]bool{}
	for _, e := range es {
		rows[e.row] = true
		if e.oldRow != "" {
			rows[e.oldRow] = true
		}
		if e.barrier {
			tables[e.table] = true
		}
	}
	all := slices.Clone(es)
	behind := func(removed []*entry) {
		for _, e := range removed {
			rows[e.row] = true
			if e.oldRow != "" {
				rows[e.oldRow] = true
			}
			if e.replay {
				// Still in walcast.parked: the next replay loads it again.
				delete(s.replayIDs, e.ev.ID)
				continue
			}
			all = append(all, e)
		}
	}
	if failed {
		behind(s.pend.removeRows(rows))
		for t := range tables {
			behind(s.pend.removeTable(t))
		}
		for _, e := range es {
			delete(s.replayIDs, e.ev.ID)
		}
	}
	for t := range tables {
		s.parkedTables[t] = true
	}
	for r := range rows {
		s.parkedRows[r] = true
		if failed && s.replaying[r] {
			s.endReplay(r)
		}
	}
	now := time.Now()
	recs := make([]checkpoint.Parked, 0, len(all))
	for _, e := range all {
		p := checkpoint.Parked{Sink: s.cfg.SinkID, Event: e.ev, Row: e.row, OldRow: e.oldRow, Attempts: e.attempts,
			LastError: e.lastErr, FirstFailure: e.firstFail, LastFailure: now}
		if p.LastError == "" {
			p.LastError = reason
			if p.LastError == "" {
				p.LastError = "parked behind an earlier parked event of the same row"
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
