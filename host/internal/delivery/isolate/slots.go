package isolate

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walcast/walcast/host/internal/control"
	"github.com/walcast/walcast/host/internal/control/schema"
	"github.com/walcast/walcast/host/internal/source/capture"
)

// SlotName is the catch-up slot of sink in the pipeline whose slot is
// main: a prefix of main, a hash of all of it, a hash of the sink id (ids
// may hold characters slot names cannot), at most 56 characters.
func SlotName(main, sink string) string {
	return slotPrefix(main) + hash8(sink)
}

// IsCatchupSlot reports whether slot is named like a catch-up slot of the
// pipeline whose slot is main.
func IsCatchupSlot(main, slot string) bool {
	p := slotPrefix(main)
	return strings.HasPrefix(slot, p) && len(slot) == len(p)+8
}

func slotPrefix(main string) string {
	short := main
	if len(short) > 36 {
		short = short[:36]
	}
	return short + "_cu" + hash8(main) + "_"
}

func hash8(s string) string {
	h := fnv.New32a()
	h.Write([]byte(s))
	return fmt.Sprintf("%08x", h.Sum32())
}

// Slots records and manages one pipeline's catch-up slots. The record
// (walcast.catchup_slots) is written before a slot is copied and deleted
// after it is dropped, so that whatever a kill leaves behind is found on
// the next start.
type Slots struct {
	db       control.Querier
	pipeline string
	main     string
}

// NewSlots returns the catch-up slots of pipeline, whose slot is main.
func NewSlots(db control.Querier, pipeline, main string) *Slots {
	return &Slots{db: db, pipeline: pipeline, main: main}
}

// Init brings the walcast schema, walcast.catchup_slots included, up to
// date (schema.Migrate).
func (s *Slots) Init(ctx context.Context) error {
	return schema.Migrate(ctx, s.db)
}

// Recover reconciles records and slots after a start: it returns the
// sinks (of those given) that must start catching up from their recorded
// slot, forgets records whose slot is gone (the sink never left the
// pipeline's slot, or had rejoined it), and drops catch-up slots of the
// pipeline that no record or known sink accounts for.
//
// A record whose slot was copied and is gone is a slot someone dropped
// while its sink depended on it: Recover refuses with a *capture.GapError
// (kind "catch-up slot lost"), unless acceptGap is set: it records the
// sink's gap up to the pipeline's slot, and the sink resumes from there.
func (s *Slots) Recover(ctx context.Context, sinks []string, acceptGap func(ctx context.Context, reason, sink string) error) (map[string]string, error) {
	known := map[string]bool{}
	for _, id := range sinks {
		known[id] = true
	}
	recorded, copied, err := s.load(ctx)
	if err != nil {
		return nil, err
	}
	existing, err := s.existing(ctx)
	if err != nil {
		return nil, err
	}
	resume := map[string]string{}
	for sink, slot := range recorded {
		switch {
		case !existing[slot] && copied[sink] && known[sink]:
			lost := &capture.GapError{
				Slot: s.main, Kind: "catch-up slot lost", Checkpoints: "see walcast status",
				What: fmt.Sprintf("catch-up slot %s of sink %s does not exist, but the sink was catching up from it (it fell behind and was detached from the pipeline's slot %s): the slot was dropped while walcast did not stream from it, and the changes %s had not received are in no other slot, since %s moved on with the other sinks",
					slot, sink, s.main, sink, s.main),
				Restore: "restore the database from a backup taken before the slot was dropped",
				Replace: "forgets the catch-up slot and resumes sink " + sink + " from the pipeline's slot",
			}
			if acceptGap == nil {
				return nil, lost
			}
			if err := acceptGap(ctx, lost.Kind+": "+sink, sink); err != nil {
				return nil, err
			}
			if err := s.Forget(ctx, sink); err != nil {
				return nil, err
			}
		case !existing[slot]:
			if err := s.Forget(ctx, sink); err != nil {
				return nil, err
			}
		case !known[sink]:
			// The sink left the pipeline file: nothing will read its slot.
			if err := s.Drop(ctx, sink, slot); err != nil {
				return nil, err
			}
		default:
			resume[sink] = slot
		}
		delete(existing, slot)
	}
	for slot := range existing {
		if err := dropSlot(ctx, s.db, slot); err != nil {
			return nil, err
		}
	}
	return resume, nil
}

func (s *Slots) load(ctx context.Context) (slots map[string]string, copied map[string]bool, err error) {
	rows, err := s.db.Query(ctx, `SELECT sink, slot, coalesce(copied, false) FROM walcast.catchup_slots WHERE pipeline = $1`, s.pipeline)
	if err != nil {
		return nil, nil, fmt.Errorf("read walcast.catchup_slots: %w", err)
	}
	slots, copied = map[string]string{}, map[string]bool{}
	var sink, slot string
	var c bool
	_, err = pgx.ForEachRow(rows, []any{&sink, &slot, &c}, func() error { slots[sink], copied[sink] = slot, c; return nil })
	if err != nil {
		return nil, nil, fmt.Errorf("read walcast.catchup_slots: %w", err)
	}
	return slots, copied, nil
}

// existing returns the catch-up slots of the pipeline that exist.
func (s *Slots) existing(ctx context.Context) (map[string]bool, error) {
	rows, err := s.db.Query(ctx, `SELECT slot_name::text FROM pg_replication_slots WHERE database = current_database()`)
	if err != nil {
		return nil, fmt.Errorf("list replication slots: %w", err)
	}
	out := map[string]bool{}
	var name string
	_, err = pgx.ForEachRow(rows, []any{&name}, func() error {
		if IsCatchupSlot(s.main, name) {
			out[name] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list replication slots: %w", err)
	}
	return out, nil
}

// Create records sink's catch-up slot, then copies the pipeline's slot
// into it (reusing it when a killed attempt left it), and returns its
// confirmed position. The caller must still hold the pipeline's slot at
// the sink's position.
func (s *Slots) Create(ctx context.Context, sink string) (slot string, confirmed uint64, err error) {
	slot = SlotName(s.main, sink)
	_, err = s.db.Exec(ctx, `
INSERT INTO walcast.catchup_slots (pipeline, sink, slot, copied) VALUES ($1, $2, $3, false)
ON CONFLICT (pipeline, sink) DO UPDATE SET slot = excluded.slot, mode = 'catching_up', since = now()`, s.pipeline, sink, slot)
	if err != nil {
		return "", 0, fmt.Errorf("record catch-up slot %s: %w", slot, err)
	}
	_, err = s.db.Exec(ctx, `SELECT pg_copy_logical_replication_slot($1, $2)`, s.main, slot)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42710" {
		err = nil // a killed attempt copied it already; it is no newer than the sink's position
	}
	if err != nil {
		return "", 0, fmt.Errorf("copy slot %s into catch-up slot %s: %w", s.main, slot, err)
	}
	// From here on the sink may leave the pipeline's slot, and this one
	// alone holds what it needs.
	if _, err := s.db.Exec(ctx, `UPDATE walcast.catchup_slots SET copied = true WHERE pipeline = $1 AND sink = $2`, s.pipeline, sink); err != nil {
		return "", 0, fmt.Errorf("record catch-up slot %s as copied: %w", slot, err)
	}
	confirmed, err = Confirmed(ctx, s.db, slot)
	return slot, confirmed, err
}

// Confirmed returns slot's confirmed_flush_lsn.
func Confirmed(ctx context.Context, db control.Querier, slot string) (uint64, error) {
	var lsn uint64
	err := db.QueryRow(ctx, `SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&lsn)
	if err != nil {
		return 0, fmt.Errorf("read confirmed position of slot %s: %w", slot, err)
	}
	return lsn, nil
}

// SetMode records the sink's mode for walcast status.
func (s *Slots) SetMode(ctx context.Context, sink string, m Mode) error {
	_, err := s.db.Exec(ctx, `UPDATE walcast.catchup_slots SET mode = $3 WHERE pipeline = $1 AND sink = $2`, s.pipeline, sink, m.String())
	if err != nil {
		return fmt.Errorf("record mode of sink %s: %w", sink, err)
	}
	return nil
}

// Drop drops sink's catch-up slot, then forgets it. The walsender that
// streamed it may take a moment to let go: Drop waits up to 10 s for that.
func (s *Slots) Drop(ctx context.Context, sink, slot string) error {
	// Given up first: a slot found gone with its record still marked was
	// dropped by someone else.
	if _, err := s.db.Exec(ctx, `UPDATE walcast.catchup_slots SET copied = false WHERE pipeline = $1 AND sink = $2`, s.pipeline, sink); err != nil {
		return fmt.Errorf("release catch-up slot %s: %w", slot, err)
	}
	if err := dropSlot(ctx, s.db, slot); err != nil {
		return err
	}
	return s.Forget(ctx, sink)
}

// Forget deletes sink's record.
func (s *Slots) Forget(ctx context.Context, sink string) error {
	_, err := s.db.Exec(ctx, `DELETE FROM walcast.catchup_slots WHERE pipeline = $1 AND sink = $2`, s.pipeline, sink)
	if err != nil {
		return fmt.Errorf("forget catch-up slot of sink %s: %w", sink, err)
	}
	return nil
}

func dropSlot(ctx context.Context, db control.Querier, slot string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := db.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		var pgErr *pgconn.PgError
		if err != nil && errors.As(err, &pgErr) && pgErr.Code == "55006" && time.Now().Before(deadline) {
			// Still active: its walsender has not noticed the disconnect yet.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("drop catch-up slot %s: %w", slot, err)
		}
		return nil
	}
}

// Teardown drops every catch-up slot of the pipeline and its records
// (walcast teardown). The table may not exist yet.
func Teardown(ctx context.Context, db control.Querier, pipeline, main string) error {
	s := NewSlots(db, pipeline, main)
	if err := s.Init(ctx); err != nil {
		return err
	}
	existing, err := s.existing(ctx)
	if err != nil {
		return err
	}
	for slot := range existing {
		if err := dropSlot(ctx, db, slot); err != nil {
			return err
		}
	}
	if _, err := db.Exec(ctx, `DELETE FROM walcast.catchup_slots WHERE pipeline = $1`, pipeline); err != nil {
		return fmt.Errorf("forget catch-up slots: %w", err)
	}
	return nil
}

// SlotState is what walcast status and /metrics show of a catch-up slot.
type SlotState struct {
	Sink, Slot, Mode string
	Since            time.Time
	// RetainedWAL is the WAL bytes the slot holds (0 when it is gone).
	RetainedWAL int64
	// BehindBytes is how far (WAL bytes) the slot's confirmed position
	// is behind the pipeline's slot's: the sink's lag as the database
	// sees it (0 when either is gone).
	BehindBytes int64
	// Lost: the slot was copied and is gone without a rejoin giving it
	// up, so the next start refuses (see Recover).
	Lost bool
}

// States returns the recorded catch-up slots of pipeline.
func States(ctx context.Context, db control.Querier, pipeline string) ([]SlotState, error) {
	rows, err := db.Query(ctx, `
SELECT c.sink, c.slot, c.mode, c.since,
       coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn), 0)::bigint,
       greatest(coalesce(pg_wal_lsn_diff(m.confirmed_flush_lsn, s.confirmed_flush_lsn), 0), 0)::bigint,
       coalesce(c.copied, false) AND s.slot_name IS NULL
FROM walcast.catchup_slots c
LEFT JOIN pg_replication_slots s ON s.slot_name = c.slot
LEFT JOIN walcast.pipelines p ON p.pipeline = c.pipeline
LEFT JOIN pg_replication_slots m ON m.slot_name = p.slot
WHERE c.pipeline = $1 ORDER BY c.sink`, pipeline)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
			return nil, nil // never detached a sink yet
		}
		return nil, fmt.Errorf("read catch-up slots: %w", err)
	}
	var out []SlotState
	var st SlotState
	_, err = pgx.ForEachRow(rows, []any{&st.Sink, &st.Slot, &st.Mode, &st.Since, &st.RetainedWAL, &st.BehindBytes, &st.Lost}, func() error {
		out = append(out, st)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read catch-up slots: %w", err)
	}
	return out, nil
}
