package reports

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// SinkFailure is the error that last stopped a sink.
type SinkFailure struct {
	Error string
	At    time.Time
}

// RecordSinkFailure records that sink stopped because of msg.
func (s *Store) RecordSinkFailure(ctx context.Context, sink, msg string) error {
	_, err := s.db.Exec(ctx, `
INSERT INTO walcast.sink_failures (pipeline, sink, error) VALUES ($1, $2, $3)
ON CONFLICT (pipeline, sink) DO UPDATE SET error = excluded.error, at = now()`, s.pipeline, sink, msg)
	if err != nil {
		return fmt.Errorf("record failure of sink %s: %w", sink, err)
	}
	return nil
}

// ClearSinkFailure forgets sink's failure once it delivers again.
func (s *Store) ClearSinkFailure(ctx context.Context, sink string) error {
	if _, err := s.db.Exec(ctx, `DELETE FROM walcast.sink_failures WHERE pipeline = $1 AND sink = $2`, s.pipeline, sink); err != nil {
		return fmt.Errorf("clear failure of sink %s: %w", sink, err)
	}
	return nil
}

// LoadSinkFailures returns the recorded failure of each sink that has one.
func (s *Store) LoadSinkFailures(ctx context.Context) (map[string]SinkFailure, error) {
	rows, err := s.db.Query(ctx, `SELECT sink, error, at FROM walcast.sink_failures WHERE pipeline = $1`, s.pipeline)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return map[string]SinkFailure{}, nil // created by an older walcast: none recorded
	}
	if err != nil {
		return nil, fmt.Errorf("load sink failures of pipeline %s: %w", s.pipeline, err)
	}
	defer rows.Close()
	out := map[string]SinkFailure{}
	for rows.Next() {
		var sink string
		var f SinkFailure
		if err := rows.Scan(&sink, &f.Error, &f.At); err != nil {
			return nil, fmt.Errorf("load sink failures of pipeline %s: %w", s.pipeline, err)
		}
		out[sink] = f
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load sink failures of pipeline %s: %w", s.pipeline, err)
	}
	return out, nil
}
