package config

import (
	"bufio"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/walcast/walcast/host/internal/delivery/outbox"
)

// settingsPage is the reference every setting of a pipeline file must be
// on, with the default the code applies.
const settingsPage = "../../../docs/reference/settings.md"

// TestSettingsReference checks docs/reference/settings.md against the
// schemas the decoder reads: each section lists exactly the attributes
// and blocks of its schema, and the defaults it gives are the code's.
func TestSettingsReference(t *testing.T) {
	sections := settingRows(t)
	for _, s := range []struct {
		section string
		schema  *hcl.BodySchema
	}{
		{"Top level", fileSchema},
		{`source "postgres"`, sourceSchema},
		{`sink "<type>" "<id>"`, sinkSchema},
		{"delivery", deliverySchema},
		{"debezium", debeziumSchema},
		{"cloudevents", cloudEventsSchema},
		{"messages", messagesSchema},
		{"transform", transformSchema},
		{"outbox", outboxSchema},
	} {
		rows, ok := sections[s.section]
		if !ok {
			t.Errorf("%s has no section %q with a table of settings", settingsPage, s.section)
			continue
		}
		var want []string
		for _, a := range s.schema.Attributes {
			want = append(want, a.Name)
		}
		for _, b := range s.schema.Blocks {
			want = append(want, b.Type)
		}
		var got []string
		for name := range rows {
			got = append(got, name)
		}
		for _, name := range want {
			if !slices.Contains(got, name) {
				t.Errorf("%s, %s: %q is missing; walcast reads it", settingsPage, s.section, name)
			}
		}
		for _, name := range got {
			if !slices.Contains(want, name) {
				t.Errorf("%s, %s: %q is not a setting walcast reads there", settingsPage, s.section, name)
			}
		}
	}
	checkDefaults(t, sections)
}

// checkDefaults compares the default column with what the decoder
// applies when a setting is left out.
func checkDefaults(t *testing.T, sections map[string]map[string]string) {
	t.Helper()
	d := DefaultDelivery()
	want := map[string]map[string]string{
		`source "postgres"`: {
			"slot":                `"` + defaultSlotName("<pipeline>") + `"`,
			"publication":         `"` + defaultSlotName("<pipeline>") + `"`,
			"allow_keyless":       "false",
			"backfill_new_tables": "false",
		},
		`sink "<type>" "<id>"`: {
			"durable": strconv.FormatBool(defaultDurable("webhook")),
		},
		"delivery": {
			"batch_size":      strconv.Itoa(d.BatchSize),
			"rate_limit":      strconv.FormatFloat(d.RateLimit, 'g', -1, 64),
			"ordering":        `"` + d.Ordering + `"`,
			"max_in_flight":   strconv.Itoa(d.MaxInFlight),
			"retry_base":      duration(d.RetryBase),
			"max_attempts":    strconv.Itoa(d.MaxAttempts),
			"deliver_timeout": duration(d.DeliverTimeout),
			"detach_after":    duration(d.DetachAfter),
			"throttle_min":    duration(d.ThrottleMin),
			"throttle_max":    duration(d.ThrottleMax),
		},
	}
	o := outbox.Defaults("")
	want["outbox"] = map[string]string{
		"id_column": `"` + o.IDColumn + `"`, "key_column": `"` + o.KeyColumn + `"`, "route_column": `"` + o.RouteColumn + `"`,
		"payload_column": `"` + o.PayloadColumn + `"`, "type_column": `"` + o.TypeColumn + `"`, "route_prefix": `"` + o.RoutePrefix + `"`,
	}
	for _, a := range deliverySchema.Attributes {
		if _, ok := want["delivery"][a.Name]; !ok {
			t.Errorf("the test knows no default for delivery's %s: add it here, from DefaultDelivery", a.Name)
		}
	}
	for section, defaults := range want {
		for name, def := range defaults {
			cell, ok := sections[section][name]
			if !ok {
				continue // reported as missing
			}
			if got := firstCode(cell); !sameValue(got, def) {
				t.Errorf("%s, %s: %s defaults to %s, the page says %q", settingsPage, section, name, def, cell)
			}
		}
	}
	if defaultDurable("sse") || !strings.Contains(sections[`sink "<type>" "<id>"`]["durable"], "`false` for sse") {
		t.Errorf("%s: durable's default for sse must read \"`false` for sse\"", settingsPage)
	}
}

// duration spells d as a pipeline file would: "30s", "2m", "200ms".
func duration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return `"` + s + `"`
}

// sameValue compares two spellings of a default: durations by value.
func sameValue(a, b string) bool {
	if a == b {
		return true
	}
	da, errA := time.ParseDuration(strings.Trim(a, `"`))
	db, errB := time.ParseDuration(strings.Trim(b, `"`))
	return errA == nil && errB == nil && strings.HasPrefix(a, `"`) && strings.HasPrefix(b, `"`) && da == db
}

var (
	codeSpan   = regexp.MustCompile("`([^`]*)`")
	settingRow = regexp.MustCompile("^\\| `([a-z_]+)")
)

func firstCode(cell string) string {
	if m := codeSpan.FindStringSubmatch(cell); m != nil {
		return m[1]
	}
	return strings.TrimSpace(cell)
}

// settingRows reads the page's tables: by section (its heading without
// backticks), the setting each row names (the first word of its first
// cell) and the row's default cell.
func settingRows(t *testing.T) map[string]map[string]string {
	t.Helper()
	f, err := os.Open(settingsPage)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]map[string]string{}
	section := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if h, ok := strings.CutPrefix(l, "## "); ok {
			section = strings.ReplaceAll(h, "`", "")
			continue
		}
		m := settingRow.FindStringSubmatch(l)
		if m == nil || section == "" {
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		if out[section] == nil {
			out[section] = map[string]string{}
		}
		def := ""
		if len(cells) > 1 {
			def = strings.TrimSpace(cells[1])
		}
		out[section][m[1]] = def
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
