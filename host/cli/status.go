package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/walcast/walcast/host/internal/config"
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
	st.ResyncOnGap = t.p.Source.OnGap == config.OnGapResync
	if !*asJSON {
		writeStatus(stdout, st, path, time.Now())
	} else {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(statusJSON(st, time.Now())); err != nil {
			fmt.Fprintln(stderr, "walcast status:", err)
			return 1
		}
	}
	if refuses(st) {
		// Scripts and health checks see it without parsing: 1 is kept
		// for a status that could not be read.
		return exitRunRefuses
	}
	return 0
}

// exitRunRefuses is walcast status's exit status when walcast run would
// refuse to start the pipeline (the reason is printed).
const exitRunRefuses = 3

// refuses reports whether walcast run would refuse to start the pipeline:
// its slot cannot be streamed without hiding lost changes, or a detached
// sink's catch-up slot is gone.
func refuses(st report.State) bool {
	if st.ResyncOnGap {
		return false
	}
	if st.Refusal != nil {
		return true
	}
	for _, c := range st.Catchups {
		if c.Lost {
			return true
		}
	}
	return false
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
	writeCatchups(w, st.Catchups, st.Sinks)
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
		fmt.Fprintf(w, "leader: %s (backend pid %d) since %s", h.Name, h.PID, h.Since.UTC().Format(time.RFC3339))
		switch n := len(st.Standbys); n {
		case 0:
			fmt.Fprintln(w, "; no other walcast run of this pipeline stands by")
		case 1:
			fmt.Fprintln(w, "; 1 other walcast run stands by")
		default:
			fmt.Fprintf(w, "; %d other walcast run processes stand by\n", n)
		}
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
	if g := st.Refusal; g != nil && st.ResyncOnGap {
		fmt.Fprintf(w, "changes were lost (%s): %s; with on_gap = \"resync\" the next walcast run records the gap, creates a new slot and resyncs the tables\n", g.Kind, g.What)
	} else if g != nil {
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
// own, and refuses for each such slot that is gone. A paused sink is
// detached too (so that it holds nothing back): said as such, not as one
// that fell behind.
func writeCatchups(w io.Writer, cs []isolate.SlotState, sinks []report.SinkState) {
	paused := map[string]bool{}
	for _, s := range sinks {
		paused[s.ID] = s.Paused
	}
	for _, c := range cs {
		if c.Lost {
			fmt.Fprintf(w, "walcast run refuses to start (catch-up slot lost): %s\n", lostCatchup(c))
			continue
		}
		why := "it fell behind; it rejoins the live stream once it has caught up"
		if paused[c.Sink] {
			why = "it is paused, and detached so that the other sinks go on; after walcast resume it catches up and rejoins the live stream"
		}
		fmt.Fprintf(w, "sink %s: %s on its own slot %s since %s, retaining %s of WAL, %s behind the pipeline's slot (%s)\n",
			c.Sink, catchupState(c, paused[c.Sink]), c.Slot, c.Since.UTC().Format(time.RFC3339), report.Bytes(c.RetainedWAL), report.Bytes(c.BehindBytes), why)
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
		if b.Resync {
			state = "resync " + state
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\n", b.ID, b.Table, b.SinksText(), state, b.Rows, b.Estimate, b.Updated.UTC().Format(time.RFC3339))
	}
	tw.Flush()
}

// catchupState is a detached sink's state: "paused", or its mode in
// words ("catching up", "rejoining").
func catchupState(c isolate.SlotState, paused bool) string {
	if paused {
		return "paused"
	}
	return strings.ReplaceAll(c.Mode, "_", " ")
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
