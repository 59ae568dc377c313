package console

import (
	"fmt"
	"html"
	"html/template"
	"strings"
	"time"

	"github.com/walcast/walcast/host/internal/report"
)

// chartHTML is an inline SVG chart, built here from numbers and escaped
// labels only, so it is safe to put in the page as is.
type chartHTML = template.HTML

// Chart geometry in SVG user units; the CSS scales the whole picture.
const (
	chartW, chartH = 480, 140
	padL, padR     = 56, 20
	padT, padB     = 10, 22
	// bytesH is the height of the smaller bytes chart under the usage one.
	bytesH = 90
)

// series is one line or set of bars, drawn with a CSS class (its colour).
type series struct {
	Name, Class string
	Values      []float64
}

// usageChart draws a sink's last 24 hours from walcast.usage: delivery
// attempts (batches), delivered events and failed attempts as grouped
// bars per hour, and under them the bytes sent per hour.
func usageChart(hours []hourUsage) chartHTML {
	if len(hours) == 0 {
		return ""
	}
	ss := []series{{Name: "attempts", Class: "attempts"}, {Name: "delivered events", Class: "delivered"}, {Name: "failed attempts", Class: "failed"}}
	bs := []series{{Name: "bytes", Class: "bytes"}}
	labels := make([]string, len(hours))
	tips := make([]string, len(hours))
	for i, h := range hours {
		ss[0].Values = append(ss[0].Values, float64(h.Attempts))
		ss[1].Values = append(ss[1].Values, float64(h.Delivered))
		ss[2].Values = append(ss[2].Values, float64(h.Failed))
		bs[0].Values = append(bs[0].Values, float64(h.Bytes))
		labels[i] = h.Hour.UTC().Format("15:04")
		tips[i] = fmt.Sprintf("%s UTC: %d attempts, %d delivered events, %d failed attempts, %s",
			h.Hour.UTC().Format("2006-01-02 15:04"), h.Attempts, h.Delivered, h.Failed, report.Bytes(h.Bytes))
	}
	return barChart("hourly deliveries", chartH, labels, tips, ss, niceMax, func(v float64) string { return fmt.Sprintf("%.0f", v) }) +
		barChart("hourly bytes", bytesH, labels, tips, bs, niceBytes, func(v float64) string { return report.Bytes(int64(v)) })
}

// barChart draws grouped bars, one group per label, in a chart of height
// h.
func barChart(title string, h int, labels, tips []string, ss []series, scale func([]series) float64, yLabel func(float64) string) chartHTML {
	top := scale(ss)
	var b strings.Builder
	open(&b, title, h)
	axes(&b, top, h, yLabel)
	n := len(labels)
	slot := float64(chartW-padL-padR) / float64(n)
	bw := slot * 0.8 / float64(len(ss))
	for i := 0; i < n; i++ {
		x0 := float64(padL) + slot*float64(i) + slot*0.1
		fmt.Fprintf(&b, `<g class="hour"><title>%s</title>`, html.EscapeString(tips[i]))
		// A transparent full-height rectangle carries the tooltip where
		// the bars are short.
		fmt.Fprintf(&b, `<rect class="hit" x="%.1f" y="%d" width="%.1f" height="%d"/>`, x0, padT, slot*0.8, h-padT-padB)
		for j, s := range ss {
			bh := s.Values[i] / top * float64(h-padT-padB)
			fmt.Fprintf(&b, `<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f"/>`,
				html.EscapeString(s.Class), x0+bw*float64(j), float64(h-padB)-bh, bw, bh)
		}
		b.WriteString(`</g>`)
		if i%6 == 0 || i == n-1 {
			fmt.Fprintf(&b, `<text class="xlabel" x="%.1f" y="%d">%s</text>`, x0+slot*0.4, h-6, html.EscapeString(labels[i]))
		}
	}
	legend(&b, ss)
	b.WriteString(`</svg>`)
	return chartHTML(b.String())
}

// lagChart draws the slot's lag samples of the last hour as a line.
func lagChart(samples []lagSample, now time.Time) chartHTML {
	var b strings.Builder
	open(&b, "slot lag, last hour", chartH)
	ss := []series{{Name: "lag", Class: "lag"}}
	for _, s := range samples {
		ss[0].Values = append(ss[0].Values, float64(s.Bytes))
	}
	top := niceBytes(ss)
	axes(&b, top, chartH, func(v float64) string { return report.Bytes(int64(v)) })
	start := now.Add(-lagWindow)
	x := func(t time.Time) float64 {
		return float64(padL) + float64(t.Sub(start))/float64(lagWindow)*float64(chartW-padL-padR)
	}
	y := func(v int64) float64 {
		return float64(chartH-padB) - float64(v)/top*float64(chartH-padT-padB)
	}
	if len(samples) > 0 {
		b.WriteString(`<polyline class="lag" points="`)
		for i, s := range samples {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%.1f,%.1f", x(s.At), y(s.Bytes))
		}
		b.WriteString(`"/>`)
		last := samples[len(samples)-1]
		fmt.Fprintf(&b, `<circle class="lag" cx="%.1f" cy="%.1f" r="2.5"><title>%s</title></circle>`,
			x(last.At), y(last.Bytes), html.EscapeString(last.At.UTC().Format("15:04:05")+" UTC: "+report.Bytes(last.Bytes)))
	} else {
		fmt.Fprintf(&b, `<text class="empty" x="%d" y="%d">no samples yet</text>`, chartW/2-40, chartH/2)
	}
	for m := 0; m <= 60; m += 15 {
		t := start.Add(time.Duration(m) * time.Minute)
		fmt.Fprintf(&b, `<text class="xlabel" x="%.1f" y="%d">%s</text>`, x(t), chartH-6, t.UTC().Format("15:04"))
	}
	b.WriteString(`</svg>`)
	return chartHTML(b.String())
}

// open starts an SVG chart of height h; its size on the page is the CSS's.
func open(b *strings.Builder, title string, h int) {
	fmt.Fprintf(b, `<svg class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s"><title>%s</title>`,
		chartW, h, chartW, h, html.EscapeString(title), html.EscapeString(title))
}

// axes draws the baseline, the top grid line and their labels.
func axes(b *strings.Builder, top float64, h int, label func(float64) string) {
	fmt.Fprintf(b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`, padL, h-padB, chartW-padR, h-padB)
	fmt.Fprintf(b, `<line class="grid" x1="%d" y1="%d" x2="%d" y2="%d"/>`, padL, padT, chartW-padR, padT)
	fmt.Fprintf(b, `<text class="ylabel" x="%d" y="%d">%s</text>`, padL-4, padT+4, html.EscapeString(label(top)))
	fmt.Fprintf(b, `<text class="ylabel" x="%d" y="%d">0</text>`, padL-4, h-padB+4)
}

func legend(b *strings.Builder, ss []series) {
	x := padL + 4
	for _, s := range ss {
		fmt.Fprintf(b, `<rect class="%s" x="%d" y="%d" width="8" height="8"/><text class="legend" x="%d" y="%d">%s</text>`,
			html.EscapeString(s.Class), x, padT, x+11, padT+8, html.EscapeString(s.Name))
		x += 14 + 7*len(s.Name)
	}
}

// niceMax is the top of the y axis: the largest value rounded up to 1, 2
// or 5 times a power of ten, and at least 1 so an empty chart has a scale.
func niceMax(ss []series) float64 {
	m := 0.0
	for _, s := range ss {
		for _, v := range s.Values {
			m = max(m, v)
		}
	}
	if m <= 1 {
		return 1
	}
	p := 1.0
	for p*10 <= m {
		p *= 10
	}
	for _, f := range []float64{1, 2, 5, 10} {
		if f*p >= m {
			return f * p
		}
	}
	return 10 * p
}

// niceBytes is niceMax in units of 1024^k, so that the axis reads 5.0 KiB
// rather than 4.9 KiB.
func niceBytes(ss []series) float64 {
	m := 0.0
	for _, s := range ss {
		for _, v := range s.Values {
			m = max(m, v)
		}
	}
	unit := 1.0
	for unit*1024 <= m {
		unit *= 1024
	}
	return unit * niceMax([]series{{Values: []float64{m / unit}}})
}
