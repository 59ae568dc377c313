package capture

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Retired is what Retire removed, and only that: a slot or publication
// that did not exist is not in it.
type Retired struct {
	// Slot is the replication slot Retire dropped; "" when there was none.
	Slot string
	// Publications are the publications Retire dropped: the ones walcast
	// created for the pipeline that still existed.
	Publications []string
	// Record: the pipeline's record existed in the walcast schema (its
	// rows there were deleted either way).
	Record bool
}

// SlotInUseError is Retire's refusal while a process streams from the
// slot.
type SlotInUseError struct {
	Slot string
	// PID is the server process that holds the slot (its walsender).
	PID int
}

func (e *SlotInUseError) Error() string {
	return fmt.Sprintf("replication slot %s is in use (server process %d streams from it): stop the process that streams from it first (walcast run, or a library stream: Stream.Close)", e.Slot, e.PID)
}

// Retire removes what a pipeline or a library stream created in the source
// database, and its rows in the walcast schema (which stays: other
// pipelines may use it): the slot, then the publications walcast created
// (the pipeline's and its keyless one), then the rows. It refuses with a
// *SlotInUseError while the slot is in use, before changing anything.
// Undelivered changes in the slot are lost for good. The walcast schema
// is never created: a database walcast never ran in has nothing to
// retire.
func Retire(ctx context.Context, db Querier, records Records, slot string) (Retired, error) {
	var out Retired
	rec, known, err := records.LoadRecord(ctx)
	if err != nil {
		return out, err
	}
	out.Record = known
	var active *int32
	err = db.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return out, fmt.Errorf("look up replication slot %s: %w", slot, err)
	case active != nil:
		return out, &SlotInUseError{Slot: slot, PID: int(*active)}
	default:
		if _, err := db.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot); err != nil {
			return out, fmt.Errorf("drop replication slot %s: %w", slot, err)
		}
		out.Slot = slot
	}
	if known && rec.CreatedPublication {
		for _, pub := range []string{rec.Publication, KeylessPublication(rec.Publication)} {
			tag, err := db.Exec(ctx, `SELECT 1 FROM pg_publication WHERE pubname = $1`, pub)
			if err != nil {
				return out, fmt.Errorf("look up publication %s: %w", pub, err)
			}
			if tag.RowsAffected() == 0 {
				continue
			}
			if _, err := db.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{pub}.Sanitize()); err != nil {
				return out, fmt.Errorf("drop publication %s: %w", pub, err)
			}
			out.Publications = append(out.Publications, pub)
		}
	}
	return out, records.Forget(ctx)
}
