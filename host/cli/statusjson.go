package cli

import (
	"time"

	"github.com/walcast/walcast/host/internal/report"
	"github.com/walcast/walcast/pluginkit"
)

// walcast status --json: the facts of the text, as machine values (enums,
// numbers, RFC 3339 times, null for "none"), for scripts. Its schema is
// written in docs/reference/status.schema.json (its fields in
// docs/reference/status.md), and
// TestStatusJSONMatchesItsSchema validates the output against it with an
// independent validator: a field added here without the schema, or a
// value outside its enum, fails that test.

// statusJSON renders st.
func statusJSON(st report.State, now time.Time) statusReport {
	rep := statusReport{Pipeline: st.Pipeline, Standbys: []statusLeader{}, Slot: slotJSON(st.Slot), Streams: []statusStream{},
		Gaps: []statusGap{}, Sinks: []statusSink{}, Backfills: []statusBackfill{}}
	if h := st.Leader; h != nil {
		rep.Leader = &statusLeader{Name: h.Name, PID: h.PID, Since: h.Since.UTC()}
	}
	for _, s := range st.Standbys {
		rep.Standbys = append(rep.Standbys, statusLeader{Name: s.Name, PID: s.PID, Since: s.Since.UTC()})
	}
	if !st.Paused.IsZero() {
		since := st.Paused.UTC()
		rep.PausedSince = &since
	}
	for _, s := range st.Streams {
		ss := statusStream{Slot: s.Slot, Streaming: s.Streaming, ReceiveTimeoutSeconds: s.ReceiveTimeout.Seconds(), ReceiveTimeouts: s.ReceiveTimeouts}
		if s.ReceiveTimeouts > 0 {
			last := s.LastReceiveTimeout.UTC()
			ss.LastReceiveTimeout = &last
		}
		rep.Streams = append(rep.Streams, ss)
	}
	if g := st.Refusal; g != nil {
		rep.Refusal = &statusRefusal{Kind: g.Kind, Message: g.Error(), HealsOnNextRun: st.ResyncOnGap}
	}
	for _, g := range st.Gaps {
		rep.Gaps = append(rep.Gaps, statusGap{Sink: g.Sink, From: g.From, To: pluginkit.FormatLSN(g.To), Reason: g.Reason, AcceptedAt: g.AcceptedAt.UTC()})
	}
	for _, s := range st.Sinks {
		rep.Sinks = append(rep.Sinks, sinkJSON(st, s, now))
	}
	for _, c := range st.Catchups {
		for i := range rep.Sinks {
			if sk := &rep.Sinks[i]; sk.ID == c.Sink {
				since := c.Since.UTC()
				sk.Mode, sk.CatchupSlot = c.Mode, &c.Slot
				sk.CatchupSince, sk.CatchupRetainedWALBytes, sk.CatchupBehindBytes = &since, c.RetainedWAL, c.BehindBytes
			}
		}
		if c.Lost && rep.Refusal == nil {
			rep.Refusal = &statusRefusal{Kind: "catch-up slot lost", Message: lostCatchup(c), HealsOnNextRun: st.ResyncOnGap}
		}
	}
	for _, b := range st.Backfills {
		bj := backfillJSON(b.ID, b.Table, b.Sinks, b.State, b.Reason, b.Rows, b.Estimate, b.Updated)
		bj.Resync = b.Resync
		rep.Backfills = append(rep.Backfills, bj)
	}
	return rep
}

func backfillJSON(id int64, table string, sinks []string, state, reason string, rows, estimate int64, updated time.Time) statusBackfill {
	out := statusBackfill{ID: id, Table: table, Sinks: sinks, State: state, Rows: rows, Estimate: estimate, Updated: updated.UTC()}
	if out.Sinks == nil {
		out.Sinks = []string{}
	}
	if reason != "" {
		out.Reason = &reason
	}
	return out
}

func slotJSON(s report.Slot) statusSlot {
	out := statusSlot{Name: s.Name}
	switch {
	case !s.Exists:
		out.State = "missing"
	case s.WALStatus == "lost":
		out.State = "lost"
	default:
		out.State = "inactive"
		if s.Active {
			out.State = "active"
		}
		out.ConfirmedFlushLSN, out.RetainedWALBytes = &s.Confirmed, s.Retained
		if s.WALStatus != "" {
			out.WALStatus = &s.WALStatus
		}
	}
	return out
}

// sinkStateValue is sinkState as a machine value.
func sinkStateValue(st report.State, s report.SinkState) string {
	switch {
	case s.Failure != nil:
		return "stopped"
	case s.Paused:
		return "paused"
	case st.Leader == nil:
		return "idle"
	}
	return "running"
}

func sinkJSON(st report.State, s report.SinkState, now time.Time) statusSink {
	d := lastDay(s, now)
	out := statusSink{ID: s.ID, Type: s.Type, State: sinkStateValue(st, s), Mode: "live", Parked: s.Parked.Count,
		Attempts24h: d.attempts, Delivered24h: d.delivered, Failed24h: d.failed, Bytes24h: d.bytes}
	if s.Checkpoint != nil {
		cp := s.Checkpoint.String()
		out.Checkpoint = &cp
	}
	if s.Paused {
		since := s.PausedSince.UTC()
		out.PausedSince = &since
	}
	if backlogShown(st, s) {
		out.Backlog = &statusBacklog{Events: s.Backlog.Events, Bytes: s.Backlog.Bytes}
		if !s.Backlog.Oldest.IsZero() {
			out.Backlog.OldestSeconds = backlogAge(s)
		}
	}
	if f := s.Failure; f != nil {
		at := f.At.UTC()
		out.LastError, out.StoppedAt = &f.Error, &at
	}
	return out
}

// statusReport is walcast status --json.
type statusReport struct {
	Pipeline string        `json:"pipeline"`
	Leader   *statusLeader `json:"leader"` // null: no walcast run leads it
	// Standbys are the other walcast run processes of the pipeline, in the
	// order they started.
	Standbys []statusLeader `json:"standbys"`
	// PausedSince is when the whole pipeline was paused; null when it is
	// not.
	PausedSince *time.Time `json:"paused_since"`
	Slot        statusSlot `json:"slot"`
	// Streams are the leader's replication streams as it last reported
	// them: the pipeline's first, then the catch-up stream of each
	// detached sink. Empty without a leader or a fresh report.
	Streams []statusStream `json:"streams"`
	// Refusal is why walcast run would refuse to start; null when it
	// would not (then walcast status exits 0, else 3).
	Refusal   *statusRefusal   `json:"refusal"`
	Gaps      []statusGap      `json:"gaps"`
	Sinks     []statusSink     `json:"sinks"`
	Backfills []statusBackfill `json:"backfills"`
}

type statusSlot struct {
	Name              string  `json:"name"`
	State             string  `json:"state"` // active, inactive, missing, lost
	ConfirmedFlushLSN *string `json:"confirmed_flush_lsn"`
	RetainedWALBytes  int64   `json:"retained_wal_bytes"`
	WALStatus         *string `json:"wal_status"`
}

// statusStream is one replication stream of the leader.
type statusStream struct {
	Slot      string `json:"slot"`
	Streaming bool   `json:"streaming"` // false: reconnecting
	// ReceiveTimeoutSeconds is the silence after which the stream is
	// ended and reconnected; ReceiveTimeouts counts the streams the leader
	// ended that way since it took the lead, the last at
	// LastReceiveTimeout.
	ReceiveTimeoutSeconds float64    `json:"receive_timeout_seconds"`
	ReceiveTimeouts       int64      `json:"receive_timeouts"`
	LastReceiveTimeout    *time.Time `json:"last_receive_timeout"`
}

type statusLeader struct {
	Name  string    `json:"name"`
	PID   int       `json:"backend_pid"`
	Since time.Time `json:"since"`
}

type statusRefusal struct {
	// Kind is "slot lost", "slot invalidated", "slot moved", "foreign
	// checkpoints", "publication dropped", "publication recreated",
	// "publication changed" or "catch-up slot lost".
	Kind    string `json:"kind"`
	Message string `json:"message"`
	// HealsOnNextRun: on_gap = "resync", so walcast run does not refuse
	// but records the gap, creates a new slot and resyncs (exit 0).
	HealsOnNextRun bool `json:"heals_on_next_run"`
}

type statusGap struct {
	Sink       string    `json:"sink"`
	From       string    `json:"from"` // the sink's checkpoint before the gap, "-" when it had none
	To         string    `json:"to"`   // the new slot's start (an LSN)
	Reason     string    `json:"reason"`
	AcceptedAt time.Time `json:"accepted_at"`
}

type statusSink struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	// State is running (a walcast run leads the pipeline), idle (none
	// does), paused, or stopped (by an error it cannot go on from:
	// LastError, StoppedAt).
	State       string     `json:"state"`
	PausedSince *time.Time `json:"paused_since"`
	// Mode is live, or catching_up or rejoining while detached onto
	// CatchupSlot (a paused durable sink of a pipeline with others is
	// detached too), with the WAL that slot retains and how far it is
	// behind the pipeline's slot.
	Mode                    string     `json:"mode"`
	CatchupSlot             *string    `json:"catchup_slot"`
	CatchupSince            *time.Time `json:"catchup_since"`
	CatchupRetainedWALBytes int64      `json:"catchup_retained_wal_bytes"`
	CatchupBehindBytes      int64      `json:"catchup_behind_bytes"`
	Checkpoint              *string    `json:"checkpoint"` // null before the first
	// Backlog is null when no daemon has reported it lately.
	Backlog      *statusBacklog `json:"backlog"`
	Parked       int            `json:"parked"`
	LastError    *string        `json:"last_error"`
	StoppedAt    *time.Time     `json:"stopped_at"`
	Attempts24h  int64          `json:"attempts_24h"`
	Delivered24h int64          `json:"delivered_24h"`
	Failed24h    int64          `json:"failed_24h"`
	Bytes24h     int64          `json:"bytes_24h"`
}

// statusBacklog is what a sink has still to resolve: events read from the
// slot and not yet delivered, parked or skipped.
type statusBacklog struct {
	Events int64 `json:"events"`
	Bytes  int64 `json:"bytes"`
	// OldestSeconds is the age of the oldest of them when reported.
	OldestSeconds float64 `json:"oldest_seconds"`
}

// statusBackfill is one backfill of the pipeline.
type statusBackfill struct {
	ID    int64  `json:"id"`
	Table string `json:"table"`
	// Sinks are the target sinks; empty: every sink.
	Sinks    []string  `json:"sinks"`
	State    string    `json:"state"` // queued, running, done, cancelled, failed
	Reason   *string   `json:"reason"`
	Rows     int64     `json:"rows"`
	Estimate int64     `json:"estimate"`
	Updated  time.Time `json:"updated"`
	// Resync is true for a resync (walcast resync).
	Resync bool `json:"resync"`
}
