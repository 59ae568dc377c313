package decode

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/walcast/walcast/host/internal/change"
)

// collector decodes messages and records what was emitted.
type collector struct {
	t      *testing.T
	d      *Decoder
	events []change.Event
}

func newCollector(t *testing.T, opts Options) *collector {
	return &collector{t: t, d: New(opts)}
}

func (c *collector) emit(ev change.Event) error {
	if !json.Valid(ev.Payload) {
		c.t.Errorf("event %s: payload is not valid JSON: %s", ev.ID, ev.Payload)
	}
	if !json.Valid(ev.Key) {
		c.t.Errorf("event %s: key is not valid JSON: %s", ev.ID, ev.Key)
	}
	c.checkLayout(ev)
	c.events = append(c.events, ev)
	return nil
}

// checkLayout fails unless ev.Layout locates exactly the envelope's
// members, as a JSON decoder reads them (library mode trusts it).
func (c *collector) checkLayout(ev change.Event) {
	c.t.Helper()
	l := ev.Layout
	if !l.Set {
		return // a backfill read: library mode scans it
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(ev.Payload, &m); err != nil {
		return // reported above
	}
	part := func(r [2]int) string { return string(ev.Payload[r[0]:r[1]]) }
	if part(l.New) != string(m["new"]) || part(l.Old) != string(m["old"]) {
		c.t.Errorf("event %s: layout new %q old %q, envelope new %s old %s", ev.ID, part(l.New), part(l.Old), m["new"], m["old"])
	}
	if want, ok := m["unchanged"]; ok != (l.Unchanged[1] > 0) || (ok && part(l.Unchanged) != string(want)) {
		c.t.Errorf("event %s: layout unchanged %v, envelope %s", ev.ID, l.Unchanged, want)
	}
	var head struct {
		XID             uint32    `json:"xid"`
		CommitTime      time.Time `json:"commit_time"`
		Cascade         bool      `json:"cascade"`
		RestartIdentity bool      `json:"restart_identity"`
	}
	if err := json.Unmarshal(ev.Payload, &head); err != nil {
		c.t.Errorf("event %s: %v", ev.ID, err)
		return
	}
	if head.XID != l.XID || !head.CommitTime.Equal(l.CommitTime) || head.Cascade != l.Cascade || head.RestartIdentity != l.RestartIdentity {
		c.t.Errorf("event %s: layout %+v, envelope %+v", ev.ID, l, head)
	}
}

// feed decodes msgs and fails the test on the first error.
func (c *collector) feed(msgs ...pglogrepl.Message) {
	c.t.Helper()
	for _, m := range msgs {
		if err := c.d.Decode(m, c.emit); err != nil {
			c.t.Fatalf("Decode(%T): %v", m, err)
		}
	}
}

func (c *collector) payloads() []string {
	out := make([]string, len(c.events))
	for i, ev := range c.events {
		out[i] = string(ev.Payload)
	}
	return out
}
