package parking

import (
	"context"
	"fmt"

	"github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// ReplayRequest asks a running daemon to replay parked events.
type ReplayRequest struct {
	Sink string
	// ID names one parked event (its row is replayed from its oldest
	// parked event on); zero means every parked event of the sink.
	ID cdc.EventID
	// Seq is the request's id in walcast.replay_requests (set by
	// ReplayRequests; RequestReplay ignores it).
	Seq int64
}

// RequestReplay stores a replay request and wakes the daemon.
func (s *Store) RequestReplay(ctx context.Context, r ReplayRequest) error {
	var id *string
	if !r.ID.IsZero() {
		v := r.ID.String()
		id = &v
	}
	if _, err := s.db.Exec(ctx, `INSERT INTO walcast.replay_requests (pipeline, sink, event_id) VALUES ($1, $2, $3)`, s.pipeline, r.Sink, id); err != nil {
		return fmt.Errorf("request replay: %w", err)
	}
	return control.Notify(ctx, s.db, s.pipeline)
}

// ReplayRequests returns the pipeline's pending requests, oldest first.
// A request stays stored until DoneReplayRequest: the daemon consumes it
// only once it was handled, so a request is never lost to a crash or to a
// sink's scheduler being swapped while it waited.
func (s *Store) ReplayRequests(ctx context.Context) ([]ReplayRequest, error) {
	rows, err := s.db.Query(ctx, `SELECT id, sink, coalesce(event_id, '') FROM walcast.replay_requests WHERE pipeline = $1 ORDER BY id`, s.pipeline)
	if err != nil {
		return nil, fmt.Errorf("read replay requests: %w", err)
	}
	defer rows.Close()
	var out []ReplayRequest
	for rows.Next() {
		var r ReplayRequest
		var id string
		if err := rows.Scan(&r.Seq, &r.Sink, &id); err != nil {
			return nil, fmt.Errorf("read replay requests: %w", err)
		}
		if id != "" {
			if r.ID, err = cdc.ParseEventID(id); err != nil {
				return nil, fmt.Errorf("read replay requests: %w", err)
			}
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read replay requests: %w", err)
	}
	return out, nil
}

// DoneReplayRequest forgets a handled request.
func (s *Store) DoneReplayRequest(ctx context.Context, seq int64) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM walcast.replay_requests WHERE pipeline = $1 AND id = $2`, s.pipeline, seq); err != nil {
		return fmt.Errorf("forget replay request %d: %w", seq, err)
	}
	return nil
}
