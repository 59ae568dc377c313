package checkpoint

import (
	"context"
	"fmt"
	"time"

	"github.com/walcast/walcast/host/internal/pg"
)

// pauseDDL holds operator pauses: a row per paused sink, and a row with
// sink = ” when the whole pipeline is paused.
const pauseDDL = `
CREATE TABLE IF NOT EXISTS walcast.pauses (
	pipeline text NOT NULL,
	sink     text NOT NULL,
	since    timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (pipeline, sink)
);
`

// ControlChannel is the NOTIFY channel the CLI wakes a running daemon with
// after a replay request or a pause/resume; the payload is the pipeline
// name. The daemon also polls, so a lost notification only delays.
const ControlChannel = pg.ControlChannel

// Pauses is a pipeline's pause state.
type Pauses struct {
	// Pipeline is set when every sink of the pipeline is paused.
	Pipeline time.Time
	// Sinks holds the sinks paused one by one.
	Sinks map[string]time.Time
}

// Paused reports whether sink is paused, by itself or with its pipeline,
// and since when.
func (p Pauses) Paused(sink string) (time.Time, bool) {
	if !p.Pipeline.IsZero() {
		return p.Pipeline, true
	}
	t, ok := p.Sinks[sink]
	return t, ok
}

// SetPaused pauses or resumes one sink, or the whole pipeline when sink is
// empty, and wakes a running daemon. It reports whether anything changed.
// Resuming the pipeline also resumes every sink paused on its own.
func (s *Store) SetPaused(ctx context.Context, sink string, paused bool) (bool, error) {
	var sql string
	args := []any{s.pipeline, sink}
	switch {
	case paused:
		sql = `INSERT INTO walcast.pauses (pipeline, sink) VALUES ($1, $2) ON CONFLICT DO NOTHING`
	case sink == "":
		sql, args = `DELETE FROM walcast.pauses WHERE pipeline = $1`, args[:1]
	default:
		sql = `DELETE FROM walcast.pauses WHERE pipeline = $1 AND sink = $2`
	}
	tag, err := s.db.Exec(ctx, sql, args...)
	if err != nil {
		return false, fmt.Errorf("record pause of pipeline %s: %w", s.pipeline, err)
	}
	if err := s.notify(ctx); err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// LoadPauses returns the pipeline's pause state.
func (s *Store) LoadPauses(ctx context.Context) (Pauses, error) {
	rows, err := s.db.Query(ctx, `SELECT sink, since FROM walcast.pauses WHERE pipeline = $1`, s.pipeline)
	if err != nil {
		return Pauses{}, fmt.Errorf("load pauses of pipeline %s: %w", s.pipeline, err)
	}
	defer rows.Close()
	p := Pauses{Sinks: map[string]time.Time{}}
	for rows.Next() {
		var sink string
		var since time.Time
		if err := rows.Scan(&sink, &since); err != nil {
			return Pauses{}, fmt.Errorf("load pauses of pipeline %s: %w", s.pipeline, err)
		}
		if sink == "" {
			p.Pipeline = since
		} else {
			p.Sinks[sink] = since
		}
	}
	if err := rows.Err(); err != nil {
		return Pauses{}, fmt.Errorf("load pauses of pipeline %s: %w", s.pipeline, err)
	}
	return p, nil
}

// notify wakes the pipeline's running daemon, if any.
func (s *Store) notify(ctx context.Context) error {
	if _, err := s.db.Exec(ctx, `SELECT pg_notify($1, $2)`, ControlChannel, s.pipeline); err != nil {
		return fmt.Errorf("notify the daemon of pipeline %s: %w", s.pipeline, err)
	}
	return nil
}
