package pauses

import (
	"context"
	"fmt"
	"time"

	"github.com/walcast/walcast/host/internal/control"
)

// State is a pipeline's pause state.
type State struct {
	// Pipeline is set when every sink of the pipeline is paused.
	Pipeline time.Time
	// Sinks holds the sinks paused one by one.
	Sinks map[string]time.Time
}

// Paused reports whether sink is paused, by itself or with its pipeline,
// and since when.
func (p State) Paused(sink string) (time.Time, bool) {
	if !p.Pipeline.IsZero() {
		return p.Pipeline, true
	}
	t, ok := p.Sinks[sink]
	return t, ok
}

// Store reads and writes one pipeline's pauses.
type Store struct {
	db       control.Querier
	pipeline string
}

// New returns the pauses of pipeline, read and written on db.
func New(db control.Querier, pipeline string) *Store {
	return &Store{db: db, pipeline: pipeline}
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
	if err := control.Notify(ctx, s.db, s.pipeline); err != nil {
		return false, err
	}
	return tag.RowsAffected() > 0, nil
}

// LoadPauses returns the pipeline's pause state.
func (s *Store) LoadPauses(ctx context.Context) (State, error) {
	rows, err := s.db.Query(ctx, `SELECT sink, since FROM walcast.pauses WHERE pipeline = $1`, s.pipeline)
	if err != nil {
		return State{}, fmt.Errorf("load pauses of pipeline %s: %w", s.pipeline, err)
	}
	defer rows.Close()
	p := State{Sinks: map[string]time.Time{}}
	for rows.Next() {
		var sink string
		var since time.Time
		if err := rows.Scan(&sink, &since); err != nil {
			return State{}, fmt.Errorf("load pauses of pipeline %s: %w", s.pipeline, err)
		}
		if sink == "" {
			p.Pipeline = since
		} else {
			p.Sinks[sink] = since
		}
	}
	if err := rows.Err(); err != nil {
		return State{}, fmt.Errorf("load pauses of pipeline %s: %w", s.pipeline, err)
	}
	return p, nil
}
