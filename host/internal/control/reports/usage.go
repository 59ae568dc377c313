package reports

import (
	"context"
	"fmt"
	"time"
)

// Usage is one sink's delivery counters for one hour.
type Usage struct {
	Sink      string
	Hour      time.Time
	Attempts  int64
	Delivered int64
	Failed    int64
	Bytes     int64
}

// AddUsage adds counters to the hourly totals.
func (s *Store) AddUsage(ctx context.Context, us []Usage) error {
	for _, u := range us {
		_, err := s.db.Exec(ctx, `
INSERT INTO walcast.usage AS u (pipeline, sink, hour, attempts, delivered, failed, bytes) VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (pipeline, sink, hour) DO UPDATE
SET attempts = u.attempts + excluded.attempts, delivered = u.delivered + excluded.delivered,
    failed = u.failed + excluded.failed, bytes = u.bytes + excluded.bytes`,
			s.pipeline, u.Sink, u.Hour, u.Attempts, u.Delivered, u.Failed, u.Bytes)
		if err != nil {
			return fmt.Errorf("record usage of sink %s: %w", u.Sink, err)
		}
	}
	return nil
}

// LoadUsage returns the hourly counters of the pipeline, newest first.
func (s *Store) LoadUsage(ctx context.Context) ([]Usage, error) {
	rows, err := s.db.Query(ctx, `SELECT sink, hour, attempts, delivered, failed, bytes FROM walcast.usage WHERE pipeline = $1 ORDER BY hour DESC, sink`, s.pipeline)
	if err != nil {
		return nil, fmt.Errorf("load usage: %w", err)
	}
	defer rows.Close()
	var out []Usage
	for rows.Next() {
		var u Usage
		if err := rows.Scan(&u.Sink, &u.Hour, &u.Attempts, &u.Delivered, &u.Failed, &u.Bytes); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, rows.Err()
}
