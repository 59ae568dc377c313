package daemon

import (
	"context"
	"time"

	"github.com/walcast/walcast/host/internal/control/reports"
)

// streamReportEvery is how often the leader reports its replication
// streams for `walcast status` (which trusts a report for 15 s).
const streamReportEvery = 2 * time.Second

// reportStreams reports the term's replication streams every
// streamReportEvery until ctx ends: `walcast status` runs in another
// process and cannot ask this one whether its stream went silent.
func (t *term) reportStreams(ctx context.Context) {
	tick := time.NewTicker(streamReportEvery)
	defer tick.Stop()
	warned := false
	for {
		if err := t.reports.ReportStreams(ctx, t.streamReports()); err != nil && ctx.Err() == nil && !warned {
			// The database may be restarting; the next tick tries again.
			t.log.Warn("report replication streams", "err", err)
			warned = true
		} else if err == nil {
			warned = false
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// streamReports describes the pipeline's stream and the catch-up stream
// of every detached sink.
func (t *term) streamReports() []reports.Stream {
	_, timeout := t.capt.Silence()
	rt := t.capt.ReceiveTimeouts()
	out := []reports.Stream{{Slot: t.captureCfg.Slot, Streaming: t.capt.Streaming(), ReceiveTimeout: timeout,
		ReceiveTimeouts: int64(rt.Count()), LastReceiveTimeout: rt.Last()}}
	for _, r := range t.runs {
		if r.isolation == nil {
			continue
		}
		slot, streaming, timeout := r.isolation.CatchupStream()
		if slot == "" {
			continue
		}
		rt := r.isolation.ReceiveTimeouts()
		out = append(out, reports.Stream{Slot: slot, Streaming: streaming, ReceiveTimeout: timeout,
			ReceiveTimeouts: int64(rt.Count()), LastReceiveTimeout: rt.Last()})
	}
	return out
}
