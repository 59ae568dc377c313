package lineage

import (
	"context"
	"fmt"

	"github.com/walcast/walcast/pluginkit/cdc"
)

// SetConfirmLimit records lsn as the furthest position walcast may have
// confirmed; 0 clears it (unknown: before walcast creates a new slot, so
// that a crash between creating it and recording its position is not
// taken for a moved slot).
func (s *Store) SetConfirmLimit(ctx context.Context, lsn uint64) error {
	var v any
	if lsn != 0 {
		v = cdc.FormatLSN(lsn)
	}
	if _, err := s.db.Exec(ctx, `UPDATE walcast.pipelines SET confirm_limit = $2::pg_lsn WHERE pipeline = $1`, s.pipeline, v); err != nil {
		return fmt.Errorf("record confirm limit of pipeline %s: %w", s.pipeline, err)
	}
	return nil
}

// RaiseConfirmLimit moves the recorded limit up to lsn (never down); the
// caller confirms up to lsn only once it returned nil.
func (s *Store) RaiseConfirmLimit(ctx context.Context, lsn uint64) error {
	_, err := s.db.Exec(ctx, `UPDATE walcast.pipelines SET confirm_limit = greatest(coalesce(confirm_limit, '0/0'), $2::pg_lsn) WHERE pipeline = $1`,
		s.pipeline, cdc.FormatLSN(lsn))
	if err != nil {
		return fmt.Errorf("raise confirm limit of pipeline %s to %s: %w", s.pipeline, cdc.FormatLSN(lsn), err)
	}
	return nil
}
