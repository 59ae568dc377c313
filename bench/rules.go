package bench

import (
	"fmt"
	"io"

	"github.com/walcast/walcast/host"
)

// The cost of a sink's filter, transform and route (docs/filters.md) per
// change through the daemon: a daemon path again with each of them in the
// sink's block (issue 28, "Performance"; issue 33, goal 6). The rules run
// in the host, on the sink's scheduler goroutine, so the figure is the
// host's CPU per change against the same path without rules in the same
// run. The filter and the transform go through daemon-stdout; a route
// needs a sink that delivers by route (the stdout sink refuses one), so
// the route paths go through daemon-webhook-1000.
const (
	PathStdoutFilter    = "daemon-stdout-filter"
	PathStdoutTransform = "daemon-stdout-transform"
	PathWebhookRoute    = "daemon-webhook-route"
	PathWebhookRules    = "daemon-webhook-rules" // all three
	// PathLibraryRules is library mode with the filter and the transform
	// (a stream has no route): the same rules without a plugin, batches
	// or gRPC around them, so the host's CPU per change moves less with
	// the machine's load than the daemon's.
	PathLibraryRules = "library-rules"
)

// The rules of those paths, on the bench table's columns (bench.go:
// id, account, name, amount numeric, payload, updated_at).
//
// The filter reads a string and a numeric column, like the issue's
// new.status == "paid" && new.total > 100.0, but keeps every change: a
// filter that drops events also spares the host their delivery, which
// would hide its own cost in the difference. A delete has no new row,
// hence the guard. The route reads the key like a route by tenant, but
// names one destination: the webhook sink sends one POST per route in a
// batch, and more routes would add requests to the route's cost.
const (
	benchFilter                       = `op == "delete" || (new.name != "" && double(new.amount) >= 0.0)`
	benchRoute                        = `key.id >= 0 ? "bench" : "bench-" + string(key.id)`
	benchDrop, benchMask, benchRename = "updated_at", "name", "account"
	benchTransform                    = `  transform {
    drop   = ["` + benchDrop + `"]
    mask   = { ` + benchMask + ` = "sha256" }
    rename = { ` + benchRename + ` = "account_id" }
  }
`
)

// rulePaths lists each rules path with what it adds to the sink block.
var rulePaths = []struct{ path, base, what, block string }{
	{PathStdoutFilter, PathStdout, "filter", fmt.Sprintf("  filter = %q\n", benchFilter)},
	{PathStdoutTransform, PathStdout, "transform: drop, mask (sha256), rename", benchTransform},
	{PathWebhookRoute, PathWebhook1000, "route by key", fmt.Sprintf("  route = %q\n", benchRoute)},
	{PathWebhookRules, PathWebhook1000, "all three", fmt.Sprintf("  filter = %q\n  route = %q\n", benchFilter, benchRoute) + benchTransform},
}

// libraryTransform is benchTransform for host.StreamConfig.
func libraryTransform() host.Transform {
	return host.Transform{Drop: []string{benchDrop}, Mask: map[string]string{benchMask: "sha256"},
		Rename: map[string]string{benchRename: "account_id"}}
}

// rulesBlock is what path p adds to the stdout sink's block ("" for a
// path without rules).
func rulesBlock(p string) string {
	for _, r := range rulePaths {
		if r.path == p {
			return r.block
		}
	}
	return ""
}

// writeRuleTable prints the host's CPU per change of each rules path
// that ran, and its difference to the same path without rules in the
// same run (daemon-stdout, library; host and plugin together beside
// it). Nothing when no pair ran.
func (r *Results) writeRuleTable(w io.Writer) {
	byName := map[string]PathResult{}
	for _, p := range r.Paths {
		byName[p.Name] = p
	}
	n := float64(r.Workload.Changes)
	hostUS := func(p PathResult) float64 { return p.Median.HostCPU / n * 1e6 }
	var rows []string
	listed := map[string]bool{}
	for _, rp := range rulePaths {
		base, ok := byName[rp.base]
		p, ran := byName[rp.path]
		if !ok || !ran || n <= 0 {
			continue
		}
		if !listed[rp.base] {
			listed[rp.base] = true
			rows = append(rows, fmt.Sprintf("| %s | none | %.2f | – | %.2f | – |", rp.base, hostUS(base), base.Median.CPUPerChange))
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %.2f | %+.2f | %.2f | %+.2f |", rp.path, rp.what,
			hostUS(p), hostUS(p)-hostUS(base), p.Median.CPUPerChange, p.Median.CPUPerChange-base.Median.CPUPerChange))
	}
	if base, ok := byName[PathLibrary]; ok && n > 0 {
		if p, ok := byName[PathLibraryRules]; ok {
			rows = append(rows, fmt.Sprintf("| %s | none | %.2f | – | – | – |", PathLibrary, hostUS(base)),
				fmt.Sprintf("| %s | filter and transform | %.2f | %+.2f | – | – |", PathLibraryRules, hostUS(p), hostUS(p)-hostUS(base)))
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\ncost per change of filters, transforms and routes (host CPU from /proc, medians; Δ against the same path without rules in the same run)")
	fmt.Fprintln(w, "\n| path | rules | host µs/change | Δ host µs/change | host + plugin µs/change | Δ host + plugin |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|")
	for _, row := range rows {
		fmt.Fprintln(w, row)
	}
}
