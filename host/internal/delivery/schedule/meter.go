package schedule

import (
	"sync"
	"time"

	"github.com/walcast/walcast/host/internal/control/reports"
)

// Meter counts delivery attempts per hour (attempts, delivered events,
// failed attempts, bytes) for walcast.usage. Throttle pauses are not
// attempts and are not metered. A nil *Meter counts nothing.
type Meter struct {
	sink string
	mu   sync.Mutex
	cur  map[time.Time]*reports.Usage
}

// NewMeter returns a meter for sink.
func NewMeter(sink string) *Meter {
	return &Meter{sink: sink, cur: map[time.Time]*reports.Usage{}}
}

// attempt counts one attempt of bytes payload bytes that delivered events
// and, when failed, failed for some or all of the others.
func (m *Meter) attempt(delivered, bytes int, failed bool) {
	if m == nil {
		return
	}
	hour := time.Now().UTC().Truncate(time.Hour)
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.cur[hour]
	if u == nil {
		u = &reports.Usage{Sink: m.sink, Hour: hour}
		m.cur[hour] = u
	}
	u.Attempts++
	u.Bytes += int64(bytes)
	u.Delivered += int64(delivered)
	if failed {
		u.Failed++
	}
}

// Take returns the counts since the last Take and resets them.
func (m *Meter) Take() []reports.Usage {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]reports.Usage, 0, len(m.cur))
	for _, u := range m.cur {
		out = append(out, *u)
	}
	clear(m.cur)
	return out
}

// Restore puts counts back after a failed write so they are not lost.
func (m *Meter) Restore(us []reports.Usage) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, u := range us {
		c := m.cur[u.Hour]
		if c == nil {
			c = &reports.Usage{Sink: u.Sink, Hour: u.Hour}
			m.cur[u.Hour] = c
		}
		c.Attempts += u.Attempts
		c.Delivered += u.Delivered
		c.Failed += u.Failed
		c.Bytes += u.Bytes
	}
}
