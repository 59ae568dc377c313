package bench

import (
	"fmt"
	"io"
	"strings"
)

// The tables issue 33 asks of one run, beside the per-path table of
// WriteTable: the ratio to pg_recvlogical by one method with best and
// median (goals 1 and 2), and the cost of each output format per change
// (goal 6).

// writeRatioTable prints, per path, the best and the median run by the
// one clock (process start → end), both ratios to pg_recvlogical, what
// the clock from the walsender's start would give, the walsender's share
// of a core and the host's and plugin's CPU per change.
func (r *Results) writeRatioTable(w io.Writer) {
	for p, why := range r.Skipped {
		fmt.Fprintf(w, "\n%s: not run (%s)\n", p, why)
	}
	drains := 0
	for _, p := range r.Paths {
		if _, fill := backfillVariants[p.Name]; !fill {
			drains++
		}
	}
	if drains == 0 || r.Workload.Changes == 0 {
		return
	}
	n := float64(r.Workload.Changes)
	fmt.Fprintf(w, "\nratio to pg_recvlogical (clock: process start → pg_recvlogical's exit at --endpos, or the slot confirmed at %s; %d runs per path, interleaved)\n\n", r.Workload.EndLSN, len(r.Paths[0].Runs))
	fmt.Fprintln(w, "| path | best changes/s | median changes/s | ratio best | ratio median | median s | of which startup s | median changes/s from walsender active | walsender CPU | host µs/change | plugin µs/change |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, p := range r.Paths {
		if _, fill := backfillVariants[p.Name]; fill {
			continue // rows/s of a backfill, not a drain of the workload
		}
		m := p.Median
		fromActive := 0.0
		if m.ActiveSeconds > 0 {
			fromActive = n / m.ActiveSeconds
		}
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %s | %s | %.2f | %.2f | %.0f | %.0f%% | %.2f | %s |\n", p.Name,
			p.Best.ChangesPerSec, m.ChangesPerSec, dash(p.RatioBest, "%.2f"), dash(p.Ratio, "%.2f"), m.Seconds, m.StartupSeconds,
			fromActive, 100*m.SenderShare, m.HostCPU/n*1e6, dash(m.PluginCPU/n*1e6, "%.2f"))
	}
}

// formatPaths pairs each path that writes a format other than walcast's
// envelope with the same path on the envelope.
var formatPaths = []struct{ path, format, base string }{
	{PathStdoutDebezium, "debezium", PathStdout},
	{PathStdoutSequin, "sequin", PathStdout},
	{PathStdoutCE, "cloudevents", PathStdout},
	{PathKafkaDebezium, "debezium", PathKafka},
}

// writeCostTable prints host + plugin CPU per change of each format
// against its envelope path in the same run: what a format costs through
// the daemon. A path that did not run is left out.
func (r *Results) writeCostTable(w io.Writer) {
	byName := map[string]PathResult{}
	for _, p := range r.Paths {
		byName[p.Name] = p
	}
	var rows []string
	for _, base := range []string{PathStdout, PathKafka} {
		b, ok := byName[base]
		if !ok {
			continue
		}
		rows = append(rows, fmt.Sprintf("| %s | walcast | %.2f | – |", base, b.Median.CPUPerChange))
		for _, f := range formatPaths {
			if p, ok := byName[f.path]; ok && f.base == base {
				rows = append(rows, fmt.Sprintf("| %s | %s | %.2f | %+.2f |", f.path, f.format, p.Median.CPUPerChange, p.Median.CPUPerChange-b.Median.CPUPerChange))
			}
		}
	}
	if len(rows) <= 1 {
		return
	}
	fmt.Fprintln(w, "\ncost per change by format through the daemon (host + plugin CPU, medians; Δ against the envelope on the same sink)")
	fmt.Fprintln(w, "\n| path | format | µs/change | Δ µs/change |")
	fmt.Fprintln(w, "|---|---|---:|---:|")
	fmt.Fprintln(w, strings.Join(rows, "\n"))
}

// writeLatencyTable prints the latency curve and, per sink, the highest
// rate it sustained (latency.go says what sustained means).
func writeLatencyTable(w io.Writer, ls []Latency) {
	if len(ls) == 0 {
		return
	}
	fmt.Fprintf(w, "\nlatency at fixed rates (commit → arrival; 10-row transactions, %.0f s per rate)\n\n", ls[0].Seconds)
	fmt.Fprintln(w, "| sink | rate | written/s | events | p50 ms | p99 ms | max ms | median first → last third ms | sustained |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---|---|")
	highest := map[string]int{}
	var sinks []string
	for _, l := range ls {
		if _, ok := highest[l.Sink]; !ok {
			sinks = append(sinks, l.Sink)
			highest[l.Sink] = 0
		}
		verdict := "yes"
		if !l.Sustained {
			verdict = "no: " + l.Why
		} else {
			highest[l.Sink] = max(highest[l.Sink], l.Rate)
		}
		fmt.Fprintf(w, "| %s | %d | %.0f | %d | %.1f | %.1f | %.1f | %.1f → %.1f | %s |\n", l.Sink, l.Rate, l.Achieved, l.Events,
			l.P50ms, l.P99ms, l.Maxms, l.FirstP50ms, l.LastP50ms, verdict)
	}
	for _, s := range sinks {
		fmt.Fprintf(w, "\n%s: highest rate sustained %s\n", s, dash(float64(highest[s]), "%.0f changes/s"))
	}
}
