package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/control/checkpoint"
	"github.com/walcast/walcast/host/internal/control/leader"
	"github.com/walcast/walcast/host/internal/delivery/isolate"
	"github.com/walcast/walcast/host/internal/ledger"
	"github.com/walcast/walcast/host/internal/source/capture"
	"github.com/walcast/walcast/host/internal/units"
	"github.com/walcast/walcast/pluginkit"
)

// cmdStatus prints what the control plane knows about a pipeline: the
// slot (active, confirmed position, WAL it retains), each sink's
// checkpoint and parked events, and the last day's metered attempts. It
// reads only the source database, so it works from any machine while the
// daemon runs.
func cmdStatus(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("status", stderr)
	asJSON := fs.Bool("json", false, "print one JSON object instead of text, for scripts")
	path, code, ok := parseArgs(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	// With --json the text goes nowhere and the report is printed at the
	// end: both come from the same reads.
	var rep statusReport
	text := stdout
	if *asJSON {
		text = io.Discard
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, store, pool, ok := openStore(ctx, path, stderr)
	if !ok {
		return 1
	}
	defer pool.Close()

	fmt.Fprintf(text, "pipeline %s\n", p.Name)
	rep.Pipeline, rep.Slot.Name = p.Name, p.Source.Slot
	// Who streams it: the holder of the pipeline's leadership lock.
	h, streamed, err := leader.Current(ctx, pool, p.Name)
	if err != nil {
		fmt.Fprintln(stderr, "walcast status:", err)
		return 1
	}
	if streamed {
		rep.Leader = &statusLeader{Name: h.Name, PID: h.PID, Since: h.Since.UTC()}
		fmt.Fprintf(text, "leader: %s (backend pid %d) since %s; other walcast run processes of this pipeline stand by\n", h.Name, h.PID, h.Since.UTC().Format(time.RFC3339))
	} else {
		fmt.Fprintln(text, "leader: none (no walcast run streams this pipeline)")
	}
	// Who would take over: every walcast run of the pipeline announces
	// itself on the source (see leader.Presence).
	standbys, err := leader.Standbys(ctx, pool, p.Name, h.Name)
	if err != nil {
		fmt.Fprintln(stderr, "walcast status:", err)
		return 1
	}
	rep.Standbys = []statusLeader{}
	for _, s := range standbys {
		rep.Standbys = append(rep.Standbys, statusLeader{Name: s.Name, PID: s.PID, Since: s.Since.UTC()})
		fmt.Fprintf(text, "standby: %s (backend pid %d) since %s\n", s.Name, s.PID, s.Since.UTC().Format(time.RFC3339))
	}
	var active bool
	var confirmed, walStatus string
	var retained int64
	missing := false
	err = pool.QueryRow(ctx, `
SELECT active, coalesce(confirmed_flush_lsn::text, ''), coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint, coalesce(wal_status, '')
FROM pg_replication_slots WHERE slot_name = $1`, p.Source.Slot).Scan(&active, &confirmed, &retained, &walStatus)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		missing = true
	case err != nil:
		fmt.Fprintln(stderr, "walcast status:", err)
		return 1
	case walStatus == "lost":
		rep.Slot.State = "lost"
		fmt.Fprintf(text, "slot %s: lost (invalidated: PostgreSQL removed WAL it still needed, max_slot_wal_keep_size; it can no longer stream)\n", p.Source.Slot)
	default:
		state := "inactive (no walcast run streams from it)"
		rep.Slot.State = "inactive"
		if active {
			state, rep.Slot.State = "active", "active"
		}
		rep.Slot.ConfirmedFlushLSN, rep.Slot.RetainedWALBytes, rep.Slot.WALStatus = confirmed, retained, walStatus
		fmt.Fprintf(text, "slot %s: %s, confirmed up to %s, retaining %s of WAL", p.Source.Slot, state, confirmed, units.Bytes(retained))
		if walStatus == "unreserved" {
			fmt.Fprint(text, ", wal_status unreserved (past max_wal_size: PostgreSQL invalidates it at the next checkpoint unless it catches up)")
		}
		fmt.Fprintln(text)
	}
	if rep.Streams, err = printStreams(ctx, store, p.Source.Slot, streamed, text); err != nil {
		fmt.Fprintln(stderr, "walcast status:", err)
		return 1
	}
	ccfg := capture.Config{DSN: p.Source.DSN, Slot: p.Source.Slot, Publication: p.Source.Publication, Tables: p.Source.Tables, Pipeline: p.Name}
	gap, err := capture.Diagnose(ctx, pool, ledger.New(pool, p.Name), ccfg)
	if err != nil {
		fmt.Fprintln(stderr, "walcast status:", err)
		return 1
	}
	switch {
	case missing && gap == nil:
		fmt.Fprintf(text, "slot %s: does not exist (walcast run creates it)\n", p.Source.Slot)
	case missing:
		fmt.Fprintf(text, "slot %s: does not exist\n", p.Source.Slot)
	}
	if missing {
		rep.Slot.State = "missing"
	}
	if gap != nil {
		rep.Refusal = gap.What
		fmt.Fprintf(text, "walcast run refuses to start (%s): %s\n", gap.Kind, gap.What)
	}
	gaps, err := store.Gaps(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "walcast status:", err)
		return 1
	}
	for _, g := range gaps {
		fmt.Fprintf(text, "gap accepted %s (%s): sink %s missed the changes after %s up to %s\n",
			g.AcceptedAt.UTC().Format(time.RFC3339), g.Reason, g.Sink, g.From, pluginkit.FormatLSN(g.To))
	}

	marks, err := store.Load(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "walcast status:", err)
		return 1
	}
	parked, err := store.ListParked(ctx, "", "")
	if err != nil {
		fmt.Fprintln(stderr, "walcast status:", err)
		return 1
	}
	perSink := map[string]int{}
	for _, pe := range parked {
		perSink[pe.Sink]++
	}
	pauses, err := store.LoadPauses(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "walcast status:", err)
		return 1
	}
	if !pauses.Pipeline.IsZero() {
		fmt.Fprintf(text, "paused since %s (walcast resume %s)\n", pauses.Pipeline.UTC().Format(time.RFC3339), path)
	}
	failures, err := store.LoadSinkFailures(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "walcast status:", err)
		return 1
	}
	usage, err := store.LoadUsage(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "walcast status:", err)
		return 1
	}
	type day struct{ attempts, delivered, failed, bytes int64 }
	last24 := map[string]*day{}
	for _, u := range usage {
		if time.Since(u.Hour) > 24*time.Hour {
			continue
		}
		d := last24[u.Sink]
		if d == nil {
			d = &day{}
			last24[u.Sink] = d
		}
		d.attempts += u.Attempts
		d.delivered += u.Delivered
		d.failed += u.Failed
		d.bytes += u.Bytes
	}
	backlogs, dbNow, err := store.LoadBacklogs(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "walcast status:", err)
		return 1
	}
	tw := tabwriter.NewWriter(text, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SINK\tTYPE\tSTATE\tCHECKPOINT\tBACKLOG\tPARKED\tATTEMPTS 24H\tDELIVERED 24H\tFAILED 24H\tBYTES 24H")
	for _, s := range p.Sinks {
		cp := "-"
		if id, ok := marks[s.ID]; ok {
			cp = id.String()
		}
		d := last24[s.ID]
		if d == nil {
			d = &day{}
		}
		// "running" only while a walcast run leads the pipeline; without
		// one nothing is delivered, whatever else is true.
		state := "running"
		if !streamed {
			state = "idle (no walcast run)"
		}
		if _, paused := pauses.Paused(s.ID); paused {
			state = "paused"
		}
		if _, failed := failures[s.ID]; failed {
			state = "stopped"
		}
		// The backlog lives in the leading daemon's memory; it reports it
		// every couple of seconds. An old report says nothing of now.
		backlog := "-"
		var bl *statusBacklog
		if b, ok := backlogs[s.ID]; ok && streamed && b.FreshAt(dbNow) {
			bl = &statusBacklog{Events: b.Events, Bytes: b.Bytes}
			backlog = fmt.Sprintf("%d (%s)", b.Events, units.Bytes(b.Bytes))
			if !b.Oldest.IsZero() {
				bl.OldestSeconds = max(b.Updated.Sub(b.Oldest).Seconds(), 0)
				backlog += fmt.Sprintf(", oldest %s", time.Duration(bl.OldestSeconds*float64(time.Second)).Round(time.Second))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", s.ID, s.Type, state, cp, backlog, perSink[s.ID], d.attempts, d.delivered, d.failed, units.Bytes(d.bytes))
		sr := statusSink{ID: s.ID, Type: s.Type, State: state, Mode: "live", Checkpoint: cp, Backlog: bl, Parked: perSink[s.ID],
			Attempts24h: d.attempts, Delivered24h: d.delivered, Failed24h: d.failed, Bytes24h: d.bytes}
		if f, ok := failures[s.ID]; ok {
			sr.LastError = f.Error
		}
		rep.Sinks = append(rep.Sinks, sr)
	}
	tw.Flush()
	cus, err := isolate.States(ctx, pool, p.Name)
	if err != nil {
		fmt.Fprintln(stderr, "walcast status:", err)
		return 1
	}
	for _, c := range cus {
		for i := range rep.Sinks {
			if rep.Sinks[i].ID == c.Sink {
				sk := &rep.Sinks[i]
				sk.Mode, sk.CatchupSlot = c.Mode, c.Slot
				since := c.Since
				sk.CatchupSince, sk.CatchupRetainedWALBytes, sk.CatchupBehindBytes = &since, c.RetainedWAL, c.BehindBytes
			}
		}
		if c.Lost {
			what := fmt.Sprintf("catch-up slot %s of sink %s does not exist, but the sink was catching up from it: the changes it had not received are in no other slot; run walcast run PIPELINE.hcl --accept-gap once to resume it from the pipeline's slot with the gap recorded", c.Slot, c.Sink)
			if rep.Refusal == "" {
				rep.Refusal = what
			}
			fmt.Fprintf(text, "walcast run refuses to start (catch-up slot lost): %s\n", what)
			continue
		}
		fmt.Fprintf(text, "sink %s: %s on its own slot %s since %s, retaining %s of WAL, %s behind the pipeline's slot (it fell behind; it rejoins the live stream once it has caught up)\n",
			c.Sink, strings.ReplaceAll(c.Mode, "_", " "), c.Slot, c.Since.UTC().Format(time.RFC3339), units.Bytes(c.RetainedWAL), units.Bytes(c.BehindBytes))
	}
	for _, s := range p.Sinks {
		if f, ok := failures[s.ID]; ok {
			fmt.Fprintf(text, "sink %s stopped at %s: %s\n", s.ID, f.At.UTC().Format(time.RFC3339), f.Error)
		}
	}
	if err := printBackfills(ctx, pool, p.Name, text); err != nil {
		fmt.Fprintln(stderr, "walcast status:", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(stderr, "walcast status:", err)
			return 1
		}
	}
	return 0
}

// statusReport is walcast status --json: the same facts as the text.
type statusReport struct {
	Pipeline string        `json:"pipeline"`
	Leader   *statusLeader `json:"leader"` // null: no walcast run leads it
	// Standbys are the other walcast run processes of the pipeline, in the
	// order they started.
	Standbys []statusLeader `json:"standbys"`
	Slot     struct {
		Name              string `json:"name"`
		State             string `json:"state"` // active, inactive, missing, lost
		ConfirmedFlushLSN string `json:"confirmed_flush_lsn,omitempty"`
		RetainedWALBytes  int64  `json:"retained_wal_bytes"`
		WALStatus         string `json:"wal_status,omitempty"`
	} `json:"slot"`
	// Streams are the leader's replication streams as it last reported
	// them: the pipeline's first, then the catch-up stream of each
	// detached sink. Empty without a leader or a fresh report.
	Streams []statusStream `json:"streams"`
	// Refusal is why walcast run would refuse to start, if it would.
	Refusal string       `json:"refusal,omitempty"`
	Sinks   []statusSink `json:"sinks"`
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

// printStreams prints the leader's last report of its replication streams
// (the pipeline's slot first) and returns them for --json. Without a
// leader there is nothing to say; a leader that has not reported for a
// while is named as such.
func printStreams(ctx context.Context, store *checkpoint.Store, slot string, streamed bool, text io.Writer) ([]statusStream, error) {
	out := []statusStream{}
	if !streamed {
		return out, nil
	}
	reports, now, err := store.LoadStreams(ctx)
	if err != nil {
		return nil, err
	}
	slots := slices.Sorted(maps.Keys(reports))
	if i := slices.Index(slots, slot); i > 0 {
		slots = append(append([]string{slot}, slots[:i]...), slots[i+1:]...)
	}
	for _, s := range slots {
		st := reports[s]
		if !st.FreshAt(now) {
			continue
		}
		ss := statusStream{Slot: s, Streaming: st.Streaming, ReceiveTimeoutSeconds: st.ReceiveTimeout.Seconds(), ReceiveTimeouts: st.ReceiveTimeouts}
		what := "replication stream"
		if s != slot {
			what = "catch-up stream"
		}
		state := "streaming"
		if !st.Streaming {
			state = "reconnecting"
		}
		fmt.Fprintf(text, "%s of slot %s: %s", what, s, state)
		if st.ReceiveTimeout > 0 {
			fmt.Fprintf(text, ", receive_timeout %s", st.ReceiveTimeout)
		}
		if st.ReceiveTimeouts > 0 {
			last := st.LastReceiveTimeout.UTC()
			ss.LastReceiveTimeout = &last
			fmt.Fprintf(text, "; the leader ended %d silent stream(s) and reconnected, the last at %s (nothing arrived within the receive timeout: a dropped connection or a vanished server)",
				st.ReceiveTimeouts, last.Format(time.RFC3339))
		}
		fmt.Fprintln(text)
		out = append(out, ss)
	}
	if _, ok := reports[slot]; !ok || !reports[slot].FreshAt(now) {
		fmt.Fprintf(text, "replication stream of slot %s: no report from the leader in the last 15 s\n", slot)
	}
	return out, nil
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
	// CatchupSlot (README, "Sinks that fall behind"), with the WAL that
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
