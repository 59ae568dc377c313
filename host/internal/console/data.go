package console

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/host/internal/control/checkpoints"
	"github.com/walcast/walcast/host/internal/control/parking"
	"github.com/walcast/walcast/host/internal/control/pauses"
	"github.com/walcast/walcast/host/internal/control/reports"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// Pipeline is one pipeline the console shows.
type Pipeline struct {
	Name  string
	Slot  string
	Sinks []Sink
	// The pipeline's control plane: its checkpoints, parked events,
	// pauses, and what its leading daemon reported. DB is the source
	// database they live in (for pg_replication_slots).
	Checkpoints *checkpoints.Store
	Parked      *parking.Store
	Pauses      *pauses.Store
	Reports     *reports.Store
	DB          control.Querier
}

// Sink is a sink as the pipeline file declares it.
type Sink struct {
	ID, Type string
	Durable  bool
}

// slotState is a row of pg_replication_slots.
type slotState struct {
	Exists    bool
	Active    bool
	ActivePID int
	Confirmed string
	// Retained is the WAL the slot keeps (from restart_lsn), Lag the WAL
	// written after its confirmed position; both in bytes.
	Retained int64
	Lag      int64
}

// readSlot reads the slot, and the server's current WAL position.
func readSlot(ctx context.Context, db control.Querier, slot string) (slotState, uint64, error) {
	var s slotState
	var pid *int32
	var current string
	err := db.QueryRow(ctx, `
SELECT pg_current_wal_lsn()::text, s.active, s.active_pid, coalesce(s.confirmed_flush_lsn::text, ''),
	coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn), 0)::bigint,
	coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.confirmed_flush_lsn), 0)::bigint
FROM pg_replication_slots s WHERE s.slot_name = $1`, slot).Scan(&current, &s.Active, &pid, &s.Confirmed, &s.Retained, &s.Lag)
	if errors.Is(err, pgx.ErrNoRows) {
		err = db.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&current)
		if err != nil {
			return s, 0, fmt.Errorf("read the current WAL position: %w", err)
		}
		lsn, err := cdc.ParseLSN(current)
		return s, lsn, err
	}
	if err != nil {
		return s, 0, fmt.Errorf("read slot %s: %w", slot, err)
	}
	s.Exists = true
	if pid != nil {
		s.ActivePID = int(*pid)
	}
	lsn, err := cdc.ParseLSN(current)
	return s, lsn, err
}

// sinkView is one row of a pipeline's sink table.
type sinkView struct {
	Sink
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
	State          slotState
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
// in place of the pipeline's figures.
func load(ctx context.Context, p *Pipeline, now time.Time) (pipelineView, error) {
	v := pipelineView{Name: p.Name, Slot: p.Slot}
	state, current, err := readSlot(ctx, p.DB, p.Slot)
	if err != nil {
		return v, err
	}
	v.State = state
	marks, err := p.Checkpoints.Load(ctx)
	if err != nil {
		return v, err
	}
	pauses, err := p.Pauses.LoadPauses(ctx)
	if err != nil {
		return v, err
	}
	v.Paused, v.PausedSince = !pauses.Pipeline.IsZero(), pauses.Pipeline
	summary, err := p.Parked.SummarizeParked(ctx)
	if err != nil {
		return v, err
	}
	parked, err := p.Parked.RecentParked(ctx, maxParkedShown)
	if err != nil {
		return v, err
	}
	usage, err := p.Reports.LoadUsage(ctx)
	if err != nil {
		return v, err
	}
	backlogs, dbNow, err := p.Reports.LoadBacklogs(ctx)
	if err != nil {
		return v, err
	}
	firstHour := now.Truncate(time.Hour).Add(-23 * time.Hour)
	for _, s := range p.Sinks {
		sv := sinkView{Sink: s, Behind: -1, Undelivered: -1, Checkpoint: "-"}
		// Reported every couple of seconds by the daemon that streams; an
		// older report says nothing of now.
		if b, ok := backlogs[s.ID]; ok && state.Active && b.FreshAt(dbNow) {
			sv.Undelivered = b.Events
		}
		sv.PausedSince, sv.Paused = pauses.Paused(s.ID)
		if id, ok := marks[s.ID]; ok {
			sv.Checkpoint = id.String()
			sv.Behind = max(0, int64(current)-int64(id.CommitLSN))
		}
		ps := summary[s.ID]
		sv.Parked, sv.LastError, sv.LastFail = ps.Count, ps.LastError, ps.LastFailure
		sv.Usage = make([]hourUsage, 24)
		for i := range sv.Usage {
			sv.Usage[i].Hour = firstHour.Add(time.Duration(i) * time.Hour)
		}
		for _, u := range usage {
			i := int(u.Hour.Sub(firstHour) / time.Hour)
			if u.Sink != s.ID || i < 0 || i >= len(sv.Usage) {
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
		v.Sinks = append(v.Sinks, sv)
	}
	for _, ps := range summary {
		v.ParkedTotal += ps.Count
	}
	for _, pe := range parked {
		v.Parked = append(v.Parked, parkedView{
			Sink: pe.Sink, ID: pe.Event.ID.String(), Table: pe.Event.Schema + "." + pe.Event.Table, Op: string(pe.Event.Op),
			Key: string(pe.Event.Key), Payload: prettyJSON(pe.Event.Payload), Attempts: pe.Attempts, LastError: pe.LastError,
			FirstFailure: pe.FirstFailure, LastFailure: pe.LastFailure,
		})
	}
	v.ParkedShown = len(v.Parked)
	return v, nil
}
