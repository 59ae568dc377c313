package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/walcast/walcast/host/internal/ledger"
	"github.com/walcast/walcast/host/internal/pg"
	"github.com/walcast/walcast/host/internal/source/capture"
)

// Retired is what Retire removed, and only that: what did not exist is
// not in it.
type Retired struct {
	// Slot is the replication slot dropped; "" when there was none.
	Slot string
	// Publications are the publications dropped: those Open created for
	// the stream (StreamConfig.Publication and its "_keyless" companion).
	// A publication Open found already there is never dropped.
	Publications []string
	// Recorded: the stream was recorded in the walcast schema (as
	// pipeline "library:<slot>"); its rows there are deleted.
	Recorded bool
}

// ErrSlotInUse is returned (wrapped) by Retire while a stream, or any
// other client, reads from the slot.
var ErrSlotInUse = errors.New("the replication slot is in use")

// Retire ends a library stream for good: it drops what Open created for
// cfg.Slot in the source database — the replication slot, the
// publications Open created (not one it found), and the stream's rows in
// the walcast schema (pipeline "library:<slot>"; the schema itself stays,
// other streams and pipelines may use it). Changes the slot still held
// are lost, and changes made from then on are no longer kept for it: an
// unused slot would make PostgreSQL keep WAL forever, so retire a
// consumer you stop using. Only DSN and Slot (and Publication, when Open
// was given one) are read from cfg.
//
// Retire refuses, changing nothing, while the slot is in use (close the
// stream first): the error wraps ErrSlotInUse. Retiring a stream that
// left nothing behind is not an error: Retired is empty.
func Retire(ctx context.Context, cfg StreamConfig) (Retired, error) {
	if cfg.DSN == "" {
		return Retired{}, errors.New("retire walcast stream: StreamConfig.DSN is empty")
	}
	if problem := pg.SlotProblem(cfg.Slot); problem != "" {
		return Retired{}, fmt.Errorf("retire walcast stream: StreamConfig.Slot %q %s", cfg.Slot, problem)
	}
	pool, err := capture.Connect(ctx, cfg.DSN, 2)
	if err != nil {
		return Retired{}, fmt.Errorf("retire walcast stream: %w", err)
	}
	defer pool.Close()
	r, err := capture.Retire(ctx, pool, ledger.New(pool, LibraryPipeline(cfg.Slot)), cfg.Slot)
	out := Retired{Slot: r.Slot, Publications: r.Publications, Recorded: r.Record}
	var inUse *capture.SlotInUseError
	if errors.As(err, &inUse) {
		return out, fmt.Errorf("retire walcast stream: %w: %w", ErrSlotInUse, err)
	}
	if err != nil {
		return out, fmt.Errorf("retire walcast stream on slot %s: %w", cfg.Slot, err)
	}
	return out, nil
}

// LibraryPipeline is the name under which a library stream on slot is
// recorded in the walcast schema (walcast status and the console show it
// as a pipeline).
func LibraryPipeline(slot string) string { return "library:" + slot }
