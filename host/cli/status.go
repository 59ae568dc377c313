package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/walcast/walcast/host/internal/delivery/isolate"
	"github.com/walcast/walcast/host/internal/report"
	"github.com/walcast/walcast/host/internal/source/backfill"
	"github.com/walcast/walcast/pluginkit"
)

// cmdStatus prints what the control plane knows about a pipeline: the
// slot (active, confirmed position, WAL it retains), each sink's
// checkpoint and parked events, and the last day's metered attempts. It
// reads only the source database, so it works from any machine while the
// daemon runs. Text and JSON are rendered from the same reads.
func cmdStatus(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("status", stderr)
	asJSON := fs.Bool("json", false, "print one JSON object instead of text, for scripts")
	path, code, ok := parseArgs(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t, ok := openTarget(ctx, path, stderr)
	if !ok {
		return 1
	}
	defer t.close()
	st, err := report.Gather(ctx, t.report(), report.Parts{Operations: true})
	if err != nil {
		fmt.Fprintln(stderr, "walcast status:", err)
		return 1
	}
	if !*asJSON {
		writeStatus(stdout, st, path, time.Now())
		return 0
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(statusJSON(st, time.Now())); err != nil {
		fmt.Fprintln(stderr, "walcast status:", err)
		return 1
	}
	return 0
}

// writeStatus is walcast status's text: who leads the pipeline, its slot
// and streams, what keeps walcast run from starting, a line per sink,
// then the sinks detached from the live stream or stopped, and the
// backfills. path is the pipeline file, for the command that resumes it.
func writeStatus(w io.Writer, st report.State, path string, now time.Time) {
	writeLeadership(w, st)
	writeSlot(w, st.Slot)
	writeStreams(w, st)
	writeRefusals(w, st, path)
	writeSinks(w, st, now)
	writeCatchups(w, st.Catchups)
	for _, s := range st.Sinks {
		if f := s.Failure; f != nil {
			fmt.Fprintf(w, "sink %s stopped at %s: %s\n", s.ID, f.At.UTC().Format(time.RFC3339), f.Error)
		}
	}
	writeBackfills(w, st.Backfills)
}

// writeLeadership names the pipeline, the walcast run that leads it (the
// holder of its leadership lock) and those that would take over (every
// walcast run announces itself on the source, see leader.Presence).
func writeLeadership(w io.Writer, st report.State) {
	fmt.Fprintf(w, "pipeline %s\n", st.Pipeline)
	if h := st.Leader; h != nil {
		fmt.Fprintf(w, "leader: %s (backend pid %d) since %s; other walcast run processes of this pipeline stand by\n", h.Name, h.PID, h.Since.UTC().Format(time.RFC3339))
	} else {
		fmt.Fprintln(w, "leader: none (no walcast run streams this pipeline)")
	}
	for _, s := range st.Standbys {
		fmt.Fprintf(w, "standby: %s (backend pid %d) since %s\n", s.Name, s.PID, s.Since.UTC().Format(time.RFC3339))
	}
}

// writeSlot describes the slot when it exists; writeRefusals says that
// it does not, with whether walcast run would create it.
func writeSlot(w io.Writer, s report.Slot) {
	switch {
	case !s.Exists:
	case s.WALStatus == "lost":
		fmt.Fprintf(w, "slot %s: lost (invalidated: PostgreSQL removed WAL it still needed, max_slot_wal_keep_size; it can no longer stream)\n", s.Name)
	default:
		state := "inactive (no walcast run streams from it)"
		if s.Active {
			state = "active"
		}
		fmt.Fprintf(w, "slot %s: %s, confirmed up to %s, retaining %s of WAL", s.Name, state, s.Confirmed, report.Bytes(s.Retained))
		if s.WALStatus == "unreserved" {
			fmt.Fprint(w, ", wal_status unreserved (past max_wal_size: PostgreSQL invalidates it at the next checkpoint unless it catches up)")
		}
		fmt.Fprintln(w)
	}
}

// writeStreams prints the leader's last report of its replication
// streams (the pipeline's slot first). Without a leader there is nothing
// to say; a leader that has not reported for a while is named as such.
func writeStreams(w io.Writer, st report.State) {
	if st.Leader == nil {
		return
	}
	for _, s := range st.Streams {
		what := "replication stream"
		if s.Slot != st.Slot.Name {
			what = "catch-up stream"
		}
		state := "streaming"
		if !s.Streaming {
			state = "reconnecting"
		}
		fmt.Fprintf(w, "%s of slot %s: %s", what, s.Slot, state)
		if s.ReceiveTimeout > 0 {
			fmt.Fprintf(w, ", receive_timeout %s", s.ReceiveTimeout)
		}
		if s.ReceiveTimeouts > 0 {
			fmt.Fprintf(w, "; the leader ended %d silent stream(s) and reconnected, the last at %s (nothing arrived within the receive timeout: a dropped connection or a vanished server)",
				s.ReceiveTimeouts, s.LastReceiveTimeout.UTC().Format(time.RFC3339))
		}
		fmt.Fprintln(w)
	}
	if len(st.Streams) == 0 || st.Streams[0].Slot != st.Slot.Name {
		fmt.Fprintf(w, "replication stream of slot %s: no report from the leader in the last 15 s\n", st.Slot.Name)
	}
}

// writeRefusals says what keeps the pipeline from streaming: a missing
// slot, why walcast run would refuse to start, the gaps accepted so far
// and a pause.
func writeRefusals(w io.Writer, st report.State, path string) {
	switch {
	case !st.Slot.Exists && st.Refusal == nil:
		fmt.Fprintf(w, "slot %s: does not exist (walcast run creates it)\n", st.Slot.Name)
	case !st.Slot.Exists:
		fmt.Fprintf(w, "slot %s: does not exist\n", st.Slot.Name)
	}
	if g := st.Refusal; g != nil {
		fmt.Fprintf(w, "walcast run refuses to start (%s): %s\n", g.Kind, g.What)
	}
	for _, g := range st.Gaps {
		fmt.Fprintf(w, "gap accepted %s (%s): sink %s missed the changes after %s up to %s\n",
			g.AcceptedAt.UTC().Format(time.RFC3339), g.Reason, g.Sink, g.From, pluginkit.FormatLSN(g.To))
	}
	if !st.Paused.IsZero() {
		fmt.Fprintf(w, "paused since %s (walcast resume %s)\n", st.Paused.UTC().Format(time.RFC3339), path)
	}
}

// writeSinks is the table of sinks: state, checkpoint, backlog, parked
// events and the last day's metered attempts.
func writeSinks(w io.Writer, st report.State, now time.Time) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SINK\tTYPE\tSTATE\tCHECKPOINT\tBACKLOG\tPARKED\tATTEMPTS 24H\tDELIVERED 24H\tFAILED 24H\tBYTES 24H")
	for _, s := range st.Sinks {
		backlog := "-"
		if backlogShown(st, s) {
			b := s.Backlog
			backlog = fmt.Sprintf("%d (%s)", b.Events, report.Bytes(b.Bytes))
			if !b.Oldest.IsZero() {
				backlog += fmt.Sprintf(", oldest %s", time.Duration(backlogAge(s)*float64(time.Second)).Round(time.Second))
			}
		}
		d := lastDay(s, now)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", s.ID, s.Type, sinkState(st, s), checkpointText(s), backlog,
			s.Parked.Count, d.attempts, d.delivered, d.failed, report.Bytes(d.bytes))
	}
	tw.Flush()
}

// writeCatchups describes each sink detached onto a catch-up slot of its
// own, and refuses for each such slot that is gone.
func writeCatchups(w io.Writer, cs []isolate.SlotState) {
	for _, c := range cs {
		if c.Lost {
			fmt.Fprintf(w, "walcast run refuses to start (catch-up slot lost): %s\n", lostCatchup(c))
			continue
		}
		fmt.Fprintf(w, "sink %s: %s on its own slot %s since %s, retaining %s of WAL, %s behind the pipeline's slot (it fell behind; it rejoins the live stream once it has caught up)\n",
			c.Sink, strings.ReplaceAll(c.Mode, "_", " "), c.Slot, c.Since.UTC().Format(time.RFC3339), report.Bytes(c.RetainedWAL), report.Bytes(c.BehindBytes))
	}
}

// writeBackfills is the table of backfills, when there are any.
func writeBackfills(w io.Writer, bs []backfill.Backfill) {
	if len(bs) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BACKFILL\tTABLE\tSINKS\tSTATE\tROWS\tESTIMATE\tUPDATED")
	for _, b := range bs {
		state := b.State
		if b.State == backfill.StateFailed && b.Reason != "" {
			state += ": " + b.Reason
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\n", b.ID, b.Table, b.SinksText(), state, b.Rows, b.Estimate, b.Updated.UTC().Format(time.RFC3339))
	}
	tw.Flush()
}

// sinkState is a sink's state in one word or a few: "running" only while
// a walcast run leads the pipeline; without one nothing is delivered,
// whatever else is true.
func sinkState(st report.State, s report.SinkState) string {
	switch {
	case s.Failure != nil:
		return "stopped"
	case s.Paused:
		return "paused"
	case st.Leader == nil:
		return "idle (no walcast run)"
	}
	return "running"
}

func checkpointText(s report.SinkState) string {
	if s.Checkpoint == nil {
		return "-"
	}
	return s.Checkpoint.String()
}

// backlogShown reports whether walcast status shows s's backlog. It lives
// in the leading daemon's memory, which reports it every couple of
// seconds: without a leader, or with an old report, it says nothing of
// now.
func backlogShown(st report.State, s report.SinkState) bool {
	return st.Leader != nil && s.Backlog != nil
}

// backlogAge is how old, in seconds, the oldest event of s's backlog was
// when the daemon reported it.
func backlogAge(s report.SinkState) float64 {
	return max(s.Backlog.Updated.Sub(s.Backlog.Oldest).Seconds(), 0)
}

// day is a sink's metered attempts over the last 24 hours.
type day struct{ attempts, delivered, failed, bytes int64 }

func lastDay(s report.SinkState, now time.Time) day {
	var d day
	for _, u := range s.Usage {
		if now.Sub(u.Hour) > 24*time.Hour {
			continue
		}
		d.attempts += u.Attempts
		d.delivered += u.Delivered
		d.failed += u.Failed
		d.bytes += u.Bytes
	}
	return d
}

// lostCatchup explains why walcast run refuses to start while a catch-up
// slot is gone.
func lostCatchup(c isolate.SlotState) string {
	return fmt.Sprintf("catch-up slot %s of sink %s does not exist, but the sink was catching up from it: the changes it had not received are in no other slot; run walcast run PIPELINE.hcl --accept-gap once to resume it from the pipeline's slot with the gap recorded", c.Slot, c.Sink)
}

// statusJSON is walcast status --json: the facts of the text, for
// scripts.
func statusJSON(st report.State, now time.Time) statusReport {
	rep := statusReport{Pipeline: st.Pipeline, Standbys: []statusLeader{}, Slot: slotJSON(st.Slot), Streams: []statusStream{}}
	if h := st.Leader; h != nil {
		rep.Leader = &statusLeader{Name: h.Name, PID: h.PID, Since: h.Since.UTC()}
	}
	for _, s := range st.Standbys {
		rep.Standbys = append(rep.Standbys, statusLeader{Name: s.Name, PID: s.PID, Since: s.Since.UTC()})
	}
	for _, s := range st.Streams {
		ss := statusStream{Slot: s.Slot, Streaming: s.Streaming, ReceiveTimeoutSeconds: s.ReceiveTimeout.Seconds(), ReceiveTimeouts: s.ReceiveTimeouts}
		if s.ReceiveTimeouts > 0 {
			last := s.LastReceiveTimeout.UTC()
			ss.LastReceiveTimeout = &last
		}
		rep.Streams = append(rep.Streams, ss)
	}
	if st.Refusal != nil {
		rep.Refusal = st.Refusal.What
	}
	for _, s := range st.Sinks {
		rep.Sinks = append(rep.Sinks, sinkJSON(st, s, now))
	}
	for _, c := range st.Catchups {
		for i := range rep.Sinks {
			if sk := &rep.Sinks[i]; sk.ID == c.Sink {
				since := c.Since
				sk.Mode, sk.CatchupSlot = c.Mode, c.Slot
				sk.CatchupSince, sk.CatchupRetainedWALBytes, sk.CatchupBehindBytes = &since, c.RetainedWAL, c.BehindBytes
			}
		}
		if c.Lost && rep.Refusal == "" {
			rep.Refusal = lostCatchup(c)
		}
	}
	return rep
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
		out.ConfirmedFlushLSN, out.RetainedWALBytes, out.WALStatus = s.Confirmed, s.Retained, s.WALStatus
	}
	return out
}

func sinkJSON(st report.State, s report.SinkState, now time.Time) statusSink {
	d := lastDay(s, now)
	out := statusSink{ID: s.ID, Type: s.Type, State: sinkState(st, s), Mode: "live", Checkpoint: checkpointText(s), Parked: s.Parked.Count,
		Attempts24h: d.attempts, Delivered24h: d.delivered, Failed24h: d.failed, Bytes24h: d.bytes}
	if backlogShown(st, s) {
		out.Backlog = &statusBacklog{Events: s.Backlog.Events, Bytes: s.Backlog.Bytes}
		if !s.Backlog.Oldest.IsZero() {
			out.Backlog.OldestSeconds = backlogAge(s)
		}
	}
	if s.Failure != nil {
		out.LastError = s.Failure.Error
	}
	return out
}

// statusReport is walcast status --json: the same facts as the text.
type statusReport struct {
	Pipeline string        `json:"pipeline"`
	Leader   *statusLeader `json:"leader"` // null: no walcast run leads it
	// Standbys are the other walcast run processes of the pipeline, in the
	// order they started.
	Standbys []statusLeader `json:"standbys"`
	Slot     statusSlot     `json:"slot"`
	// Streams are the leader's replication streams as it last reported
	// them: the pipeline's first, then the catch-up stream of each
	// detached sink. Empty without a leader or a fresh report.
	Streams []statusStream `json:"streams"`
	// Refusal is why walcast run would refuse to start, if it would.
	Refusal string       `json:"refusal,omitempty"`
	Sinks   []statusSink `json:"sinks"`
}

type statusSlot struct {
	Name              string `json:"name"`
	State             string `json:"state"` // active, inactive, missing, lost
	ConfirmedFlushLSN string `json:"confirmed_flush_lsn,omitempty"`
	RetainedWALBytes  int64  `json:"retained_wal_bytes"`
	WALStatus         string `json:"wal_status,omitempty"`
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

type statusSink struct {
	ID    string `json:"id"`
	Type  string `json:"type"`
	State string `json:"state"`
	// Mode is live, or catching_up or rejoining while detached onto
	// CatchupSlot (docs/slow-sinks.md), with the WAL that
	// slot retains and how far it is behind the pipeline's slot.
	Mode                    string     `json:"mode"`
	CatchupSlot             string     `json:"catchup_slot,omitempty"`
	CatchupSince            *time.Time `json:"catchup_since,omitempty"`
	CatchupRetainedWALBytes int64      `json:"catchup_retained_wal_bytes,omitempty"`
	CatchupBehindBytes      int64      `json:"catchup_behind_bytes,omitempty"`
	Checkpoint              string     `json:"checkpoint"`
	// Backlog is null when no daemon has reported it lately.
	Backlog      *statusBacklog `json:"backlog"`
	Parked       int            `json:"parked"`
	LastError    string         `json:"last_error,omitempty"`
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
