package reports

import "github.com/walcast/walcast/host/internal/control"

// Store reads and writes one pipeline's reports.
type Store struct {
	db       control.Querier
	pipeline string
}

// New returns the reports of pipeline, read and written on db.
func New(db control.Querier, pipeline string) *Store {
	return &Store{db: db, pipeline: pipeline}
}
