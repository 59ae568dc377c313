package lineage

import (
	"context"
	"fmt"

	"github.com/walcast/walcast/pluginkit/cdc"
)

// Identity is the cluster and database a pipeline's checkpoints were made
// on, and the incarnation of its slot.
type Identity struct {
	SystemIdentifier string
	DatabaseOID      uint32
	// SlotCreatedLSN is where the slot walcast streams from was created
	// (or adopted, for a slot older than this record); zero when unknown.
	SlotCreatedLSN uint64
}

// SetIdentity records the cluster, database and slot incarnation the
// pipeline's checkpoints belong to.
func (s *Store) SetIdentity(ctx context.Context, id Identity) error {
	_, err := s.db.Exec(ctx, `
UPDATE walcast.pipelines
SET system_identifier = $2, database_oid = $3, slot_created_lsn = $4::pg_lsn, slot_created_at = now()
WHERE pipeline = $1`, s.pipeline, id.SystemIdentifier, int64(id.DatabaseOID), cdc.FormatLSN(id.SlotCreatedLSN))
	if err != nil {
		return fmt.Errorf("record cluster identity of pipeline %s: %w", s.pipeline, err)
	}
	return nil
}

// ForgetSlot clears the slot incarnation, after walcast dropped a slot it
// had just created in a start that failed: nothing was streamed from it.
func (s *Store) ForgetSlot(ctx context.Context) error {
	_, err := s.db.Exec(ctx, `UPDATE walcast.pipelines SET slot_created_lsn = NULL, slot_created_at = NULL, confirm_limit = NULL WHERE pipeline = $1`, s.pipeline)
	if err != nil {
		return fmt.Errorf("forget slot of pipeline %s: %w", s.pipeline, err)
	}
	return nil
}
