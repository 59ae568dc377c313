package rules

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/walcast/walcast/pluginkit/cdc"
)

// The cost per change of the rules of make bench's rules paths
// (bench/rules.go: keep the two in step) on the bench table's rows, so
// that it can be checked without PostgreSQL (docs/benchmarks.md,
// "Filters, transforms and routes"; the goal is 0.5 µs each):
//
//	go test -run '^$' -bench Apply -benchmem ./host/internal/delivery/rules/
//
// Besides ns/op each reports cpu-ns/op, the process's CPU time (user +
// system, garbage collection included) per Apply: on a machine shared
// with other work wall-clock ns/op grows with the load, CPU time much
// less.
var (
	benchFilterSpec    = Spec{Filter: `op == "delete" || (new.name != "" && double(new.amount) >= 0.0)`}
	benchTransformSpec = Spec{Transform: Transform{Drop: []string{"updated_at"},
		Mask: map[string]string{"name": MaskSHA256}, Rename: map[string]string{"account": "account_id"}}}
	benchRouteSpec = Spec{Route: `"bench-" + string(key.id % 8)`}
	benchAllSpec   = Spec{Filter: benchFilterSpec.Filter, Route: benchRouteSpec.Route, Transform: benchTransformSpec.Transform}
)

func BenchmarkApplyNone(b *testing.B)       { benchApply(b, Spec{}) }
func BenchmarkApplyFilter(b *testing.B)     { benchApply(b, benchFilterSpec) }
func BenchmarkApplyTransform3(b *testing.B) { benchApply(b, benchTransformSpec) }
func BenchmarkApplyRoute(b *testing.B)      { benchApply(b, benchRouteSpec) }
func BenchmarkApplyAll(b *testing.B)        { benchApply(b, benchAllSpec) }

// benchEvents is the bench workload's mix in small: ten inserts, two
// updates and a delete (make bench writes 1,000,000, 200,000 and
// 100,000), envelopes as the decoder writes them.
func benchEvents(tb testing.TB) []cdc.Event {
	var evs []cdc.Event
	head := func(lsn, op string, id int) string {
		return fmt.Sprintf(`{"id":"0/%s:%d","commit_lsn":"0/%s","xid":%d,"commit_time":"2026-12-02T14:50:00.123456Z","schema":"public","table":"bench","op":"%s","key":{"id":%d},`,
			lsn, id%100, lsn, 750+id/100, op, id)
	}
	row := func(id int, amount string) string {
		return fmt.Sprintf(`{"id":%d,"account":%d,"name":"customer-%d","amount":"%s","payload":"c4ca4238a0b923820dcc509a6f75849bc81e728d9d4c2f636f067f89cc14862c","updated_at":"2026-12-02T14:50:00.12%04dZ"}`,
			id, id%1000, id, amount, id)
	}
	for id := 1; id <= 10; id++ {
		evs = append(evs, event(tb, head("1A2B3C8", "insert", id)+`"new":`+row(id, fmt.Sprintf("%d.%02d", id/100, id%100))+`,"old":null}`))
	}
	for id := 1; id <= 2; id++ {
		evs = append(evs, event(tb, head("1B00000", "update", id)+`"new":`+row(id, fmt.Sprintf("%d.%02d", 1+id/100, id%100))+`,"old":null}`))
	}
	evs = append(evs, event(tb, head("1C00000", "delete", 1)+`"new":null,"old":{"id":1}}`))
	return evs
}

func benchApply(b *testing.B, s Spec) {
	r := mustCompile(b, s)
	evs := benchEvents(b)
	for _, ev := range evs {
		if _, err := r.Apply(ev, nil); err != nil {
			b.Fatalf("%s: %v", ev.Payload, err)
		}
	}
	b.ReportAllocs()
	cpu0 := cpuTime()
	i := 0
	for b.Loop() {
		if _, err := r.Apply(evs[i], nil); err != nil {
			b.Fatal(err)
		}
		if i++; i == len(evs) {
			i = 0
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's user + system CPU time in ns.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
