package daemon

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
)

const metricsPage = "../../../docs/reference/metrics.md"

// TestMetricsReference checks docs/reference/metrics.md against every
// collector walcast registers: a row per metric, with its kind, and no
// row for a metric walcast does not serve.
func TestMetricsReference(t *testing.T) {
	served := servedMetrics(t)
	page, err := os.ReadFile(metricsPage)
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]string{}
	for _, m := range metricRow.FindAllStringSubmatch(string(page), -1) {
		if _, dup := documented[m[1]]; dup {
			t.Errorf("%s lists %s twice", metricsPage, m[1])
		}
		documented[m[1]] = m[2]
	}
	for name, kind := range served {
		got, ok := documented[name]
		switch {
		case !ok:
			t.Errorf("%s has no row for %s, which walcast serves", metricsPage, name)
		case got != kind:
			t.Errorf("%s: %s is a %s, the page says %s", metricsPage, name, kind, got)
		}
	}
	for name := range documented {
		if _, ok := served[name]; !ok {
			t.Errorf("%s lists %s, which walcast does not serve", metricsPage, name)
		}
	}
}

// metricRow is a row of the page's tables: | `name` | kind | meaning |.
var metricRow = regexp.MustCompile("(?m)^\\| `(walcast_[a-z_]+)` \\| ([a-z]+) \\|")

var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

// servedMetrics returns every walcast_* metric the process registers,
// with its kind: the pipeline collector's descriptions (every field of
// it that is one), the Deliver histogram, the slot watch and the role
// collector. The Go and process collectors are the client library's.
func servedMetrics(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	add := func(d *prometheus.Desc, kind string) {
		m := descName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		out[m[1]] = kind
	}
	// A counter's name ends in _total (Prometheus's convention, which
	// promtool enforces); the collector reports the kind only when it
	// collects, which needs a running pipeline.
	kindOf := func(d *prometheus.Desc) string {
		if strings.Contains(d.String(), `_total"`) {
			return "counter"
		}
		return "gauge"
	}
	c := newPipelineCollector(nil, nil, nil, nil, nil)
	v := reflect.ValueOf(c).Elem()
	descType := reflect.TypeFor[*prometheus.Desc]()
	for i := range v.NumField() {
		if f := v.Field(i); f.Type() == descType {
			// The fields are unexported; reading them through their
			// address is what a test of the package may do.
			d := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface().(*prometheus.Desc)
			add(d, kindOf(d))
		}
	}
	for _, sc := range c.sinkCounters {
		add(sc.desc, "counter")
	}
	describe := func(col prometheus.Collector, kind string) {
		ch := make(chan *prometheus.Desc, 16)
		col.Describe(ch)
		close(ch)
		for d := range ch {
			add(d, kind)
		}
	}
	describe(newDeliverSeconds(), "histogram")
	for _, col := range newSlotWatch(nil, "p", "s", 0, nil).collectors() {
		describe(col, "gauge")
	}
	describe(roleCollector{}, "gauge")
	for _, name := range []string{"walcast_sink_events_delivered_total", "walcast_slot_wal_at_risk", "walcast_leader"} {
		if _, ok := out[name]; !ok {
			t.Fatalf("%s not found among the collectors: the test no longer sees them all", name)
		}
	}
	if n := len(out); n < 30 {
		t.Fatalf("only %d metrics found: the test no longer sees them all", n)
	}
	return out
}
