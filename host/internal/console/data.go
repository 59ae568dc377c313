package console

import (
	"context"
	"time"

	"github.com/walcast/walcast/host/internal/report"
)

// sinkView is one row of a pipeline's sink table.
type sinkView struct {
	report.Sink
	Paused      bool
	PausedSince time.Time
	Checkpoint  string
	// Behind is the WAL written after the commit of the sink's checkpoint:
	// an upper bound of what it still has to receive (other tables and
	// walcast's own writes count too). -1 when there is no checkpoint.
	Behind int64
	// Undelivered is the backlog the leading daemon last reported: events
	// read from the slot and not yet resolved for the sink; -1 when no
	// daemon reported it lately.
	Undelivered int64
	Parked      int
	LastError   string
	LastFail    time.Time
	Usage       []hourUsage // the last 24 hours, oldest first
	Total       hourUsage
	Chart       chartHTML
}

type hourUsage struct {
	Hour                               time.Time
	Attempts, Delivered, Failed, Bytes int64
}

// parkedView is one parked event as the page lists it.
type parkedView struct {
	Sink, ID, Table, Op, Key, Payload string
	Attempts                          int
	LastError                         string
	FirstFailure, LastFailure         time.Time
}

// pipelineView is everything the page shows about a pipeline.
type pipelineView struct {
	Name           string
	Err            string
	Slot           string
	State          report.Slot
	Paused         bool
	PausedSince    time.Time
	Sinks          []sinkView
	Parked         []parkedView
	ParkedShown    int
	ParkedTotal    int
	LagChart       chartHTML
	LagNow         int64
	LagSampleCount int
}

// maxParkedShown bounds the parked events listed per pipeline: the page
// stays readable and the query cheap when a sink parked thousands.
const maxParkedShown = 200

// load reads what the page shows about p. An error is shown on the page,
// in place of the pipeline's figures: the view then holds only what was
// read before it.
func load(ctx context.Context, p *report.Pipeline, now time.Time) (pipelineView, error) {
	st, err := report.Gather(ctx, *p, report.Parts{RecentParked: maxParkedShown})
	v := pipelineView{Name: p.Name, Slot: p.Slot, State: st.Slot, Paused: !st.Paused.IsZero(), PausedSince: st.Paused}
	if err != nil {
		return v, err
	}
	for _, s := range st.Sinks {
		v.Sinks = append(v.Sinks, viewSink(st, s, now))
	}
	v.ParkedTotal = st.ParkedTotal
	for _, pe := range st.RecentParked {
		v.Parked = append(v.Parked, parkedView{
			Sink: pe.Sink, ID: pe.Event.ID.String(), Table: pe.Event.Schema + "." + pe.Event.Table, Op: string(pe.Event.Op),
			Key: string(pe.Event.Key), Payload: prettyJSON(pe.Event.Payload), Attempts: pe.Attempts, LastError: pe.LastError,
			FirstFailure: pe.FirstFailure, LastFailure: pe.LastFailure,
		})
	}
	v.ParkedShown = len(v.Parked)
	return v, nil
}

// viewSink is a sink's row of the page, with its last 24 hours of usage
// in hourly bars.
func viewSink(st report.State, s report.SinkState, now time.Time) sinkView {
	sv := sinkView{Sink: s.Sink, Behind: -1, Undelivered: -1, Checkpoint: "-",
		Paused: s.Paused, PausedSince: s.PausedSince, Parked: s.Parked.Count, LastError: s.Parked.LastError, LastFail: s.Parked.LastFailure}
	// A backlog is reported only by the daemon that streams the slot.
	if s.Backlog != nil && st.Slot.Active {
		sv.Undelivered = s.Backlog.Events
	}
	if id := s.Checkpoint; id != nil {
		sv.Checkpoint = id.String()
		sv.Behind = max(0, int64(st.Slot.Current)-int64(id.CommitLSN))
	}
	firstHour := now.Truncate(time.Hour).Add(-23 * time.Hour)
	sv.Usage = make([]hourUsage, 24)
	for i := range sv.Usage {
		sv.Usage[i].Hour = firstHour.Add(time.Duration(i) * time.Hour)
	}
	for _, u := range s.Usage {
		i := int(u.Hour.Sub(firstHour) / time.Hour)
		if i < 0 || i >= len(sv.Usage) {
			continue
		}
		h := &sv.Usage[i]
		h.Attempts += u.Attempts
		h.Delivered += u.Delivered
		h.Failed += u.Failed
		h.Bytes += u.Bytes
		sv.Total.Attempts += u.Attempts
		sv.Total.Delivered += u.Delivered
		sv.Total.Failed += u.Failed
		sv.Total.Bytes += u.Bytes
	}
	sv.Chart = usageChart(sv.Usage)
	return sv
}
