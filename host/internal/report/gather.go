package report

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/walcast/walcast/host/internal/control/checkpoints"
	"github.com/walcast/walcast/host/internal/control/leader"
	"github.com/walcast/walcast/host/internal/control/lineage"
	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/control/pauses"
	"github.com/walcast/walcast/host/internal/control/reports"
	"github.com/walcast/walcast/host/internal/delivery/isolate"
	"github.com/walcast/walcast/host/internal/ledger"
	"github.com/walcast/walcast/host/internal/source/backfill"
	"github.com/walcast/walcast/host/internal/source/capture"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Gather reads p's state: the slot and each sink's checkpoint, pause,
// parked events, usage and backlog, and what want adds. On an error it
// returns what it read before, and the error. ctx bounds every read.
func Gather(ctx context.Context, p Pipeline, want Parts) (State, error) {
	g := &gathering{p: p, want: want, st: State{Pipeline: p.Name, Slot: Slot{Name: p.Slot}}}
	for _, step := range g.steps() {
		if err := step(ctx); err != nil {
			return g.st, err
		}
	}
	g.st.Sinks = g.sinks()
	return g.st, nil
}

// gathering is one Gather: the state as far as it is read, and the
// tables read whole, which sinks joins per sink at the end.
type gathering struct {
	p    Pipeline
	want Parts
	st   State

	marks    map[string]cdc.EventID
	pauses   pauses.State
	parked   map[string]parking.Summary
	failures map[string]reports.SinkFailure
	usage    []reports.Usage
	backlogs map[string]reports.Backlog
	dbNow    time.Time // the database's clock, which dates the backlogs
}

// steps are the reads of one Gather, in order, each when it is wanted.
func (g *gathering) steps() []func(context.Context) error {
	var steps []func(context.Context) error
	add := func(wanted bool, s ...func(context.Context) error) {
		if wanted {
			steps = append(steps, s...)
		}
	}
	ops := g.want.Operations
	add(ops, g.leadership)
	add(true, g.slot)
	add(ops, g.streams, g.refusal, g.gaps)
	add(true, g.checkpoints, g.pausesAndParked)
	add(g.want.RecentParked > 0, g.recentParked)
	add(ops, g.failed)
	add(true, g.usageAndBacklogs)
	add(ops, g.catchups, g.backfills)
	return steps
}

func (g *gathering) leadership(ctx context.Context) error {
	h, leads, err := leader.Current(ctx, g.p.DB, g.p.Name)
	if err != nil {
		return err
	}
	if leads {
		g.st.Leader = &h
	}
	g.st.Standbys, err = leader.Standbys(ctx, g.p.DB, g.p.Name, h.Name)
	return err
}

func (g *gathering) slot(ctx context.Context) error {
	s, err := ReadSlot(ctx, g.p.DB, g.p.Slot)
	if err == nil {
		g.st.Slot = s
	}
	return err
}

// streams keeps the leader's fresh reports, the pipeline's slot first.
func (g *gathering) streams(ctx context.Context) error {
	if g.st.Leader == nil {
		return nil
	}
	streams, now, err := reports.New(g.p.DB, g.p.Name).LoadStreams(ctx)
	if err != nil {
		return err
	}
	slots := slices.Sorted(maps.Keys(streams))
	if i := slices.Index(slots, g.p.Slot); i > 0 {
		slots = append(append([]string{g.p.Slot}, slots[:i]...), slots[i+1:]...)
	}
	for _, s := range slots {
		if st := streams[s]; st.FreshAt(now) {
			g.st.Streams = append(g.st.Streams, st)
		}
	}
	return nil
}

func (g *gathering) refusal(ctx context.Context) (err error) {
	g.st.Refusal, err = capture.Diagnose(ctx, g.p.DB, ledger.New(g.p.DB, g.p.Name), g.p.Capture)
	return err
}

func (g *gathering) gaps(ctx context.Context) (err error) {
	g.st.Gaps, err = lineage.New(g.p.DB, g.p.Name).Gaps(ctx)
	return err
}

func (g *gathering) checkpoints(ctx context.Context) (err error) {
	g.marks, err = checkpoints.New(g.p.DB, g.p.Name).Load(ctx)
	return err
}

func (g *gathering) pausesAndParked(ctx context.Context) error {
	paused, err := pauses.New(g.p.DB, g.p.Name).LoadPauses(ctx)
	if err != nil {
		return err
	}
	g.pauses, g.st.Paused = paused, paused.Pipeline
	if g.parked, err = parking.New(g.p.DB, g.p.Name).SummarizeParked(ctx); err != nil {
		return err
	}
	for _, ps := range g.parked {
		g.st.ParkedTotal += ps.Count
	}
	return nil
}

func (g *gathering) recentParked(ctx context.Context) (err error) {
	g.st.RecentParked, err = parking.New(g.p.DB, g.p.Name).RecentParked(ctx, g.want.RecentParked)
	return err
}

func (g *gathering) failed(ctx context.Context) (err error) {
	g.failures, err = reports.New(g.p.DB, g.p.Name).LoadSinkFailures(ctx)
	return err
}

func (g *gathering) usageAndBacklogs(ctx context.Context) (err error) {
	r := reports.New(g.p.DB, g.p.Name)
	if g.usage, err = r.LoadUsage(ctx); err != nil {
		return err
	}
	g.backlogs, g.dbNow, err = r.LoadBacklogs(ctx)
	return err
}

func (g *gathering) catchups(ctx context.Context) (err error) {
	g.st.Catchups, err = isolate.States(ctx, g.p.DB, g.p.Name)
	return err
}

func (g *gathering) backfills(ctx context.Context) (err error) {
	g.st.Backfills, err = backfill.List(ctx, g.p.DB, g.p.Name)
	return err
}

// sinks joins the tables read into each declared sink's state.
func (g *gathering) sinks() []SinkState {
	var out []SinkState
	for _, s := range g.p.Sinks {
		ss := SinkState{Sink: s, Parked: g.parked[s.ID]}
		if id, ok := g.marks[s.ID]; ok {
			ss.Checkpoint = &id
		}
		ss.PausedSince, ss.Paused = g.pauses.Paused(s.ID)
		if b, ok := g.backlogs[s.ID]; ok && b.FreshAt(g.dbNow) {
			ss.Backlog = &b
		}
		if f, ok := g.failures[s.ID]; ok {
			ss.Failure = &f
		}
		for _, u := range g.usage {
			if u.Sink == s.ID {
				ss.Usage = append(ss.Usage, u)
			}
		}
		out = append(out, ss)
	}
	return out
}
