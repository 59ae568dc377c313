package daemon

import (
	"context"

	controlplane "github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/host/internal/delivery/ack"
	"github.com/walcast/walcast/host/internal/delivery/fanout"
	"github.com/walcast/walcast/host/internal/delivery/isolate"
	"github.com/walcast/walcast/host/internal/delivery/schedule"
	"github.com/walcast/walcast/pluginkit"
)

// The few places the daemon asks a sink run for its scheduler go through
// these: a durable sink's scheduler changes as it detaches and rejoins
// (package isolate).

// scheduler is the sink's scheduler delivering now.
func (r *sinkRun) scheduler() *schedule.Scheduler {
	if r.isolation != nil {
		return r.isolation.Scheduler()
	}
	return r.sched
}

// stats are the sink's delivery counters over every scheduler it ran.
func (r *sinkRun) stats() *schedule.Stats {
	if r.isolation != nil {
		return r.isolation.Stats()
	}
	return &r.sched.Stats
}

func (r *sinkRun) setPaused(p bool) {
	if r.isolation != nil {
		r.isolation.SetPaused(p)
		return
	}
	r.sched.SetPaused(p)
}

// run delivers until stop closes or ctx ends.
func (r *sinkRun) run(ctx context.Context, stop <-chan struct{}) error {
	if r.isolation != nil {
		return r.isolation.Run(ctx, stop)
	}
	return r.sched.Run(ctx, stop)
}

// mode is the sink's mode (live for sinks that never detach).
func (r *sinkRun) mode() isolate.Mode {
	if r.isolation != nil {
		return r.isolation.Mode()
	}
	return isolate.Live
}

// isolateSinks gives every durable sink of a pipeline with several sinks
// its isolate.Sink; sinks that a previous run left catching up (resume:
// sink id → catch-up slot) start detached from the pipeline's stream.
// start is where the pipeline's tracker started.
func (t *term) isolateSinks(resume map[string]string, slots *isolate.Slots, start uint64) {
	for i, r := range t.runs {
		slot := resume[r.cfg.ID]
		// A sink alone in its pipeline holds no one else back: detaching
		// it would cost a slot copy and gain nothing. It still resumes a
		// catch-up slot a previous run left (the file may have had more
		// sinks then).
		if !r.cfg.Durable || (len(t.runs) < 2 && slot == "") {
			continue
		}
		if slot != "" {
			t.fan.Detach(i)
		}
		r.isolation = isolate.NewSink(isolate.Config{
			SinkID:    r.cfg.ID,
			Index:     i,
			Policy:    isolate.Policy{After: r.cfg.Delivery.DetachAfter},
			Slots:     slots,
			Fanout:    t.fan,
			Tracker:   t.tracker,
			Start:     start,
			Received:  t.capt.Received,
			Capture:   t.captureCfg,
			QueueSize: cap(r.queue.C),
			Format:    r.queue.Format,
			NewScheduler: func(q *fanout.Queue, tr *ack.Tracker, index int, position pluginkit.EventID) *schedule.Scheduler {
				return t.newScheduler(r, q, tr, index, position)
			},
			Live:       r.sched,
			ResumeSlot: slot,
			Logger:     t.log,
		})
	}
}

// catchupRetained reads the WAL each detached sink's catch-up slot
// retains, by sink.
func catchupRetained(db controlplane.Querier, pipeline string) func(ctx context.Context) (map[string]int64, error) {
	return func(ctx context.Context) (map[string]int64, error) {
		sts, err := isolate.States(ctx, db, pipeline)
		if err != nil {
			return nil, err
		}
		out := make(map[string]int64, len(sts))
		for _, st := range sts {
			out[st.Sink] = st.RetainedWAL
		}
		return out, nil
	}
}
