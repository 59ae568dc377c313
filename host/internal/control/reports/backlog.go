package reports

import (
	"context"
	"fmt"
	"time"

	"github.com/walcast/walcast/host/internal/control"
)

// Backlog is a sink's backlog as the daemon last reported it.
type Backlog struct {
	Events, Bytes int64
	// Oldest is when the oldest unresolved event was read from the slot;
	// zero with an empty backlog.
	Oldest time.Time
	// Updated is when the daemon wrote the report.
	Updated time.Time
}

// fresh is how old a report (a backlog, a stream) may be and still be
// shown: the daemon reports every couple of seconds while it leads, so an
// older one is from a daemon that stopped or lost the lead.
const fresh = 15 * time.Second

// FreshAt reports whether the report still says something at now (the
// database's clock, which wrote Updated).
func (b Backlog) FreshAt(now time.Time) bool { return now.Sub(b.Updated) < fresh }

// ReportBacklogs records the backlog of every sink in one statement.
func (s *Store) ReportBacklogs(ctx context.Context, backlogs map[string]Backlog) error {
	if len(backlogs) == 0 {
		return nil
	}
	sinks := make([]string, 0, len(backlogs))
	events := make([]int64, 0, len(backlogs))
	bytes := make([]int64, 0, len(backlogs))
	oldest := make([]*time.Time, 0, len(backlogs))
	for sink, b := range backlogs {
		sinks, events, bytes = append(sinks, sink), append(events, b.Events), append(bytes, b.Bytes)
		var at *time.Time
		if !b.Oldest.IsZero() {
			at = &b.Oldest
		}
		oldest = append(oldest, at)
	}
	_, err := s.db.Exec(ctx, `
INSERT INTO walcast.sink_backlog (pipeline, sink, events, bytes, oldest_at, updated_at)
SELECT $1, u.sink, u.events, u.bytes, u.oldest_at, now()
FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::timestamptz[]) AS u(sink, events, bytes, oldest_at)
ON CONFLICT (pipeline, sink) DO UPDATE SET events = excluded.events, bytes = excluded.bytes,
	oldest_at = excluded.oldest_at, updated_at = excluded.updated_at`, s.pipeline, sinks, events, bytes, oldest)
	if err != nil {
		return fmt.Errorf("report sink backlogs of pipeline %s: %w", s.pipeline, err)
	}
	return nil
}

// LoadBacklogs returns the last reported backlog of each sink, and the
// database's clock now, to judge their freshness against.
func (s *Store) LoadBacklogs(ctx context.Context) (map[string]Backlog, time.Time, error) {
	var now time.Time
	if err := s.db.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return nil, now, fmt.Errorf("load sink backlogs of pipeline %s: read clock: %w", s.pipeline, err)
	}
	rows, err := s.db.Query(ctx, `SELECT sink, events, bytes, oldest_at, updated_at FROM walcast.sink_backlog WHERE pipeline = $1`, s.pipeline)
	if control.NoSchema(err) {
		return map[string]Backlog{}, now, nil // never reported
	}
	if err != nil {
		return nil, now, fmt.Errorf("load sink backlogs of pipeline %s: %w", s.pipeline, err)
	}
	defer rows.Close()
	out := map[string]Backlog{}
	for rows.Next() {
		var sink string
		var b Backlog
		var oldest *time.Time
		if err := rows.Scan(&sink, &b.Events, &b.Bytes, &oldest, &b.Updated); err != nil {
			return nil, now, fmt.Errorf("load sink backlogs of pipeline %s: %w", s.pipeline, err)
		}
		if oldest != nil {
			b.Oldest = *oldest
		}
		out[sink] = b
	}
	if err := rows.Err(); err != nil {
		return nil, now, fmt.Errorf("load sink backlogs of pipeline %s: %w", s.pipeline, err)
	}
	return out, now, nil
}
