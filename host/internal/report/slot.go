package report

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/pluginkit/cdc"
)

// walNow is the server's current WAL position: where it writes, or on a
// standby (where pg_current_wal_lsn fails: status may be pointed at one,
// e.g. after a failover) where it has replayed to.
const walNow = `CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END`

// ReadSlot reads the slot named from pg_replication_slots, and the
// server's current WAL position. A slot that does not exist is no error:
// Exists is false.
func ReadSlot(ctx context.Context, db control.Querier, name string) (Slot, error) {
	s := Slot{Name: name}
	var pid *int32
	var current string
	err := db.QueryRow(ctx, `
WITH now AS (SELECT `+walNow+` AS lsn)
SELECT now.lsn::text, s.active, s.active_pid, coalesce(s.confirmed_flush_lsn::text, ''),
	coalesce(pg_wal_lsn_diff(now.lsn, s.restart_lsn), 0)::bigint,
	coalesce(pg_wal_lsn_diff(now.lsn, s.confirmed_flush_lsn), 0)::bigint,
	coalesce(s.wal_status, '')
FROM now, pg_replication_slots s WHERE s.slot_name = $1`, name).Scan(&current, &s.Active, &pid, &s.Confirmed, &s.Retained, &s.Lag, &s.WALStatus)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if err := db.QueryRow(ctx, `SELECT (`+walNow+`)::text`).Scan(&current); err != nil {
			return Slot{}, fmt.Errorf("read the current WAL position: %w", err)
		}
	case err != nil:
		return Slot{}, fmt.Errorf("read slot %s: %w", name, err)
	default:
		s.Exists = true
		if pid != nil {
			s.ActivePID = int(*pid)
		}
	}
	lsn, err := cdc.ParseLSN(current)
	if err != nil {
		return Slot{}, err
	}
	s.Current = lsn
	return s, nil
}
