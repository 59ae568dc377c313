package schedule

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/host/internal/delivery/fanout"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Replay: parked events go back into pending, flagged as replayed, and
// are delivered like live ones (batching, rate limit, lanes, table
// barriers, retries), in batches of their own that tell the sink they are
// a replay. The rows stay parked meanwhile, so live events of those rows
// keep parking behind them; a row flows again only once nothing of it is
// left in walcast.parked. An update that changed the key belongs to two
// rows, so a replay by id loads every row linked to the asked one by such
// updates: their parked events can only go out together, in order. And a
// replay never loads an event without every parked event that must go
// before it (ReplaySet): a row parked behind a parked truncate brings the
// truncate along, and the truncate the events of its table parked before
// it.

// replayReq is a replay request; done, when not nil, receives nil once
// every row it loaded has left replay (delivered, or parked again), or the
// error that kept it from starting.
type replayReq struct {
	parking.ReplayRequest
	done chan error
}

// replayWaiter is a replayReq's done with the rows still being replayed.
type replayWaiter struct {
	rows map[string]bool
	done chan error
}

// ErrStopped says that a scheduler stopped before a replay asked of it
// ended, or before it took the request: a sink that detaches or rejoins
// (package isolate) swaps its scheduler, and the pipeline stops its
// schedulers on shutdown. Ask the scheduler that delivers now.
var ErrStopped = errors.New("the sink's scheduler stopped before the replay ended")

// Replay asks the scheduler to deliver parked events again. It does not
// wait for them to be delivered.
func (s *Scheduler) Replay(ctx context.Context, r parking.ReplayRequest) error {
	return s.replay(ctx, replayReq{ReplayRequest: r})
}

// ReplayWait asks for a replay like Replay and returns a channel that
// receives once: nil when every row the replay loaded has left replay
// (delivered, or parked again), the error that kept it from starting,
// ErrStopped when the scheduler stopped first, or ctx's error when ctx
// ended before the scheduler took the request. Only the first case and a
// start error mean the request was handled.
func (s *Scheduler) ReplayWait(ctx context.Context, r parking.ReplayRequest) <-chan error {
	done := make(chan error, 1)
	if err := s.replay(ctx, replayReq{ReplayRequest: r, done: done}); err != nil {
		done <- err
	}
	return done
}

// replay hands r to Run. The channel is unbuffered and Run stops reading
// it once it stops, so a request is either taken by a running scheduler
// (which answers its done) or refused with ErrStopped: never left in a
// buffer nobody reads.
func (s *Scheduler) replay(ctx context.Context, r replayReq) error {
	select {
	case s.replays <- r:
		return nil
	case <-s.exited:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startReplay loads parked events into pending: every parked event of the
// sink, or ReplaySet's events for the requested one.
func (s *Scheduler) startReplay(ctx context.Context, req replayReq) error {
	if s.cfg.Parked == nil {
		return errors.New("this sink does not park events")
	}
	ps, err := ReplaySet(ctx, s.cfg.Parked, s.cfg.SinkID, req.ID)
	if err != nil {
		return err
	}
	if ps == nil && !req.ID.IsZero() {
		return fmt.Errorf("event %s is not parked for sink %s", req.ID, s.cfg.SinkID)
	}
	n := s.loadReplay(ps)
	s.log.Info("replaying parked events", "events", n)
	if req.done != nil {
		w := &replayWaiter{rows: map[string]bool{}, done: req.done}
		for _, p := range ps {
			for _, r := range []string{p.Row, p.OldRow} {
				if r != "" && s.replaying[r] {
					w.rows[r] = true
				}
			}
		}
		if len(w.rows) == 0 {
			w.done <- nil
		} else {
			s.waiters = append(s.waiters, w)
		}
	}
	return nil
}

// ReplaySet returns, in id order, the parked events of sink that a replay
// delivers: every one when id is zero; else the parked events of id's row
// and of the rows linked to it through updates that changed a key, plus
// every parked event that must go before one of those (withAncestors).
// It returns nil when id is not parked. `walcast replay` uses it to say
// what a replay by id covers.
func ReplaySet(ctx context.Context, store ParkStore, sink string, id cdc.EventID) ([]parking.Event, error) {
	if id.IsZero() {
		return store.ListParked(ctx, sink, "")
	}
	row, err := store.ParkedRowOf(ctx, sink, id)
	if err != nil || row == "" {
		return nil, err
	}
	group, err := parkedGroup(ctx, store, sink, row)
	if err != nil {
		return nil, err
	}
	return withAncestors(ctx, store, sink, group)
}

// parkedGroup returns the parked events of row and of every row linked to
// it through parked updates that changed a key, in id order.
func parkedGroup(ctx context.Context, store ParkStore, sink, row string) ([]parking.Event, error) {
	seen := map[string]bool{}
	ids := map[cdc.EventID]bool{}
	var out []parking.Event
	for todo := []string{row}; len(todo) > 0; {
		r := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[r] {
			continue
		}
		seen[r] = true
		ps, err := store.ListParked(ctx, sink, r)
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			if ids[p.Event.ID] {
				continue
			}
			ids[p.Event.ID] = true
			out = append(out, p)
			for _, o := range []string{p.Row, p.OldRow} {
				if o != "" && !seen[o] {
					todo = append(todo, o)
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b parking.Event) int { return a.Event.ID.Compare(b.Event.ID) })
	return out, nil
}

// withAncestors returns ps plus every parked event that must go before one
// of them, in id order. A parked event a goes before a later event b of
// its table when they share a row (either row of a key change), or when
// either is a truncate; the set is closed under that. One backward pass
// over each table's parked events finds them: going down in id, an event
// is needed when it is asked for, shares a row with a needed later one,
// is a truncate with any needed later event, or lies before a needed
// truncate.
func withAncestors(ctx context.Context, store ParkStore, sink string, ps []parking.Event) ([]parking.Event, error) {
	type table struct{ schema, name string }
	asked := map[table]map[cdc.EventID]bool{}
	for _, p := range ps {
		t := table{p.Event.Schema, p.Event.Table}
		if asked[t] == nil {
			asked[t] = map[cdc.EventID]bool{}
		}
		asked[t][p.Event.ID] = true
	}
	var out []parking.Event
	for t, ids := range asked {
		all, err := store.ListParkedTable(ctx, sink, t.schema, t.name)
		if err != nil {
			return nil, err
		}
		rows := map[string]bool{}
		anyLater, truncLater := false, false
		for i := len(all) - 1; i >= 0; i-- {
			p := all[i]
			trunc := p.Event.Op.TableWide()
			if !ids[p.Event.ID] && !truncLater && !(trunc && anyLater) && !rows[p.Row] && (p.OldRow == "" || !rows[p.OldRow]) {
				continue
			}
			out = append(out, p)
			rows[p.Row] = true
			if p.OldRow != "" {
				rows[p.OldRow] = true
			}
			anyLater = true
			truncLater = truncLater || trunc
		}
	}
	slices.SortFunc(out, func(a, b parking.Event) int { return a.Event.ID.Compare(b.Event.ID) })
	return out, nil
}

// loadReplay makes parked events pending as replayed ones (those not
// pending or in flight already) and returns how many. Their rows stay
// parked (live events keep parking behind) until continueReplay finds
// nothing of them left.
func (s *Scheduler) loadReplay(ps []parking.Event) int {
	var es []*entry
	for _, p := range ps {
		if s.replayIDs[p.Event.ID] {
			continue
		}
		s.replayIDs[p.Event.ID] = true
		e := newEntry(p.Event, nil)
		e.row, e.oldRow, e.replay, e.firstFail = p.Row, p.OldRow, true, p.FirstFailure
		keep, err := s.applyRules(e, nil)
		e.filtered, e.ruleErr = !keep, err
		es = append(es, e)
		s.replaying[p.Row] = true
		if p.OldRow != "" {
			s.replaying[p.OldRow] = true
		}
	}
	s.pending.putBack(es)
	return len(es)
}

// continueReplay runs after replayed events of row were delivered: once
// none of the row's replayed events is pending or in flight, it picks up
// what was parked meanwhile (with what must go before it), or, with
// nothing left, lets the row flow again.
func (s *Scheduler) continueReplay(ctx context.Context, row string) error {
	if !s.replaying[row] || s.pending.hasReplay(row) || s.pending.rowsInFlight[s.pending.id(row)] > 0 {
		return nil // still going, or stopped by a failure (parked again)
	}
	var left []parking.Event
	err := retryStore(ctx, s.log, func(ctx context.Context) error {
		var err error
		left, err = parkedGroup(ctx, s.cfg.Parked, s.cfg.SinkID, row)
		return err
	})
	if err != nil {
		return err
	}
	for _, p := range left {
		if p.Row == row || p.OldRow == row {
			err := retryStore(ctx, s.log, func(ctx context.Context) error {
				var err error
				left, err = withAncestors(ctx, s.cfg.Parked, s.cfg.SinkID, left)
				return err
			})
			if err != nil {
				return err
			}
			s.loadReplay(left)
			var rows []string
			for _, p := range left {
				rows = append(rows, p.Row)
				if p.OldRow != "" {
					rows = append(rows, p.OldRow)
				}
			}
			s.extendWaiters([]string{row}, rows)
			return nil
		}
	}
	s.endReplay(row)
	s.parked.remove(row)
	return nil
}

// replayHolding returns the rows being replayed that hold e back through
// its table, when nothing else does: its table's truncate row, or, for a
// truncate, the table's parked rows. nil when e waits for anything else,
// or for its own rows (their replay picks it up: continueReplay).
func (s *Scheduler) replayHolding(e *entry) []string {
	if s.parked.has(e.row) || (e.oldRow != "" && s.parked.has(e.oldRow)) {
		return nil
	}
	if s.parked.truncated(e.table) {
		if tr := e.table + "\x1f" + tableKey; s.replaying[tr] {
			return []string{tr}
		}
		return nil
	}
	if !e.barrier {
		return nil
	}
	var rows []string
	for r := range s.parked.rows {
		if tableOf(r) == e.table {
			if !s.replaying[r] {
				return nil
			}
			rows = append(rows, r)
		}
	}
	return rows
}

// joinReplay makes e, just parked on arrival behind the rows of a replay
// (replayHolding), part of that replay, so that one replay leaves neither
// its table held behind a replayed truncate nor a truncate that came while
// it ran: without this they would wait for the next one. e is pending as a
// replayed event: behind what it waits for (every parked event that must
// go before it is pending or in flight, or is loaded by continueReplay
// before those are resolved), and its replay's waiters wait for it too.
func (s *Scheduler) joinReplay(e *entry, holding []string) {
	e.replay = true
	s.replayIDs[e.ev.ID] = true
	rows := []string{e.row}
	if e.oldRow != "" {
		rows = append(rows, e.oldRow)
	}
	for _, r := range rows {
		s.replaying[r] = true
	}
	s.pending.add(e)
	s.extendWaiters(holding, rows)
}

// extendWaiters makes every waiter of a replay of one of from wait for
// the rows being replayed among rows too: they carry on its replay.
func (s *Scheduler) extendWaiters(from, rows []string) {
	for _, w := range s.waiters {
		for _, f := range from {
			if w.rows[f] {
				for _, r := range rows {
					if s.replaying[r] {
						w.rows[r] = true
					}
				}
				break
			}
		}
	}
}

// endReplay ends the replay of row: done, or stopped by a failure.
func (s *Scheduler) endReplay(row string) {
	delete(s.replaying, row)
	keep := s.waiters[:0]
	for _, w := range s.waiters {
		delete(w.rows, row)
		if len(w.rows) == 0 {
			w.done <- nil
			continue
		}
		keep = append(keep, w)
	}
	clear(s.waiters[len(keep):])
	s.waiters = keep
}

// ReplayParked delivers a sink's parked events when no daemon runs (the
// daemon-less `walcast replay`) through a Scheduler of its own, so that it
// follows the daemon's replay rules exactly: batching, rate limit, row
// order, retries with backoff, parking again after max_attempts. It
// returns once every row the request loaded has left replay or when ctx
// ends (batches in flight finish first, each within its deliver timeout),
// with the number of events delivered; walcast.parked tells what is left.
func ReplayParked(ctx context.Context, cfg Config, sink Deliverer, req parking.ReplayRequest) (int64, error) {
	if cfg.Parked == nil {
		return 0, errors.New("replay: no store for parked events")
	}
	cfg.Index = 0
	cfg.Position = cdc.EventID{}
	// No live events: an empty queue and a tracker nothing is added to.
	tracker := ack.New([]ack.SinkSpec{{ID: cfg.SinkID, Durable: true}}, 0)
	s := New(cfg, fanout.NewQueue(1, true), tracker, sink)
	// The scheduler runs on a context of its own: when ctx ends it is
	// stopped gently (its batches in flight land), and abandon ends it
	// only if they do not.
	runCtx, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	stop := make(chan struct{})
	ran := make(chan error, 1)
	go func() { ran <- s.Run(runCtx, stop) }()
	done := make(chan error, 1)
	var err error
	if err = s.replay(ctx, replayReq{ReplayRequest: req, done: done}); err == nil {
		select {
		case err = <-done:
		case err = <-ran:
			if err == nil {
				err = errors.New("replay: the scheduler stopped before the replay ended")
			}
			return s.Stats.Replayed.Load(), err
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	close(stop)
	// Run returns once the batches in flight landed; give up on them only
	// well after their own deliver timeout.
	t := time.AfterFunc(s.cfg.DeliverTimeout+30*time.Second, abandon)
	defer t.Stop()
	if rerr := <-ran; err == nil {
		err = rerr
	}
	return s.Stats.Replayed.Load(), err
}

// exit runs as Run returns: it refuses replay requests from now on and
// tells those still waiting for their rows that this scheduler will not
// finish them (the rows stay in walcast.parked).
func (s *Scheduler) exit() {
	close(s.exited)
	for _, w := range s.waiters {
		w.done <- ErrStopped
	}
	s.waiters = nil
}
