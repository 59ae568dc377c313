package reports

import (
	"context"
	"fmt"
	"time"

	"github.com/walcast/walcast/host/internal/control"
)

// Stream is a replication stream as the leading daemon last reported it.
type Stream struct {
	Slot      string
	Streaming bool
	// ReceiveTimeout is the silence after which the stream is ended and
	// reconnected (0 before its first connection).
	ReceiveTimeout time.Duration
	// ReceiveTimeouts counts the streams of this slot the reporting
	// process ended for silence since it took the lead; LastReceiveTimeout
	// is when it ended the last one (zero when none).
	ReceiveTimeouts    int64
	LastReceiveTimeout time.Time
	// Updated is when the daemon wrote the report.
	Updated time.Time
}

// FreshAt reports whether the report still says something at now (the
// database's clock, which wrote Updated): the daemon reports every couple
// of seconds while it leads.
func (s Stream) FreshAt(now time.Time) bool { return now.Sub(s.Updated) < fresh }

// ReportStreams records the state of the pipeline's streams in one
// statement.
func (s *Store) ReportStreams(ctx context.Context, streams []Stream) error {
	if len(streams) == 0 {
		return nil
	}
	slots := make([]string, len(streams))
	streaming := make([]bool, len(streams))
	timeoutMS := make([]int64, len(streams))
	timeouts := make([]int64, len(streams))
	last := make([]*time.Time, len(streams))
	for i, st := range streams {
		slots[i], streaming[i], timeoutMS[i], timeouts[i] = st.Slot, st.Streaming, st.ReceiveTimeout.Milliseconds(), st.ReceiveTimeouts
		if !st.LastReceiveTimeout.IsZero() {
			at := st.LastReceiveTimeout
			last[i] = &at
		}
	}
	_, err := s.db.Exec(ctx, `
INSERT INTO walcast.streams (pipeline, slot, streaming, receive_timeout_ms, receive_timeouts, last_receive_timeout_at, updated_at)
SELECT $1, u.slot, u.streaming, u.timeout_ms, u.timeouts, u.last_at, now()
FROM unnest($2::text[], $3::boolean[], $4::bigint[], $5::bigint[], $6::timestamptz[]) AS u(slot, streaming, timeout_ms, timeouts, last_at)
ON CONFLICT (pipeline, slot) DO UPDATE SET streaming = excluded.streaming, receive_timeout_ms = excluded.receive_timeout_ms,
	receive_timeouts = excluded.receive_timeouts, last_receive_timeout_at = excluded.last_receive_timeout_at, updated_at = excluded.updated_at`,
		s.pipeline, slots, streaming, timeoutMS, timeouts, last)
	if err != nil {
		return fmt.Errorf("report replication streams of pipeline %s: %w", s.pipeline, err)
	}
	return nil
}

// LoadStreams returns the last reported state of each of the pipeline's
// streams, by slot, and the database's clock now, to judge their
// freshness against.
func (s *Store) LoadStreams(ctx context.Context) (map[string]Stream, time.Time, error) {
	var now time.Time
	if err := s.db.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return nil, now, fmt.Errorf("load replication streams of pipeline %s: read clock: %w", s.pipeline, err)
	}
	rows, err := s.db.Query(ctx, `
SELECT slot, streaming, receive_timeout_ms, receive_timeouts, last_receive_timeout_at, updated_at
FROM walcast.streams WHERE pipeline = $1`, s.pipeline)
	if control.NoSchema(err) {
		return map[string]Stream{}, now, nil // never reported
	}
	if err != nil {
		return nil, now, fmt.Errorf("load replication streams of pipeline %s: %w", s.pipeline, err)
	}
	defer rows.Close()
	out := map[string]Stream{}
	for rows.Next() {
		var st Stream
		var ms int64
		var last *time.Time
		if err := rows.Scan(&st.Slot, &st.Streaming, &ms, &st.ReceiveTimeouts, &last, &st.Updated); err != nil {
			return nil, now, fmt.Errorf("load replication streams of pipeline %s: %w", s.pipeline, err)
		}
		st.ReceiveTimeout = time.Duration(ms) * time.Millisecond
		if last != nil {
			st.LastReceiveTimeout = *last
		}
		out[st.Slot] = st
	}
	if err := rows.Err(); err != nil {
		return nil, now, fmt.Errorf("load replication streams of pipeline %s: %w", s.pipeline, err)
	}
	return out, now, nil
}
