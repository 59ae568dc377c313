package host

import (
	"context"
	"fmt"

	"github.com/walcast/walcast/host/internal/source/backfill"
	"github.com/walcast/walcast/host/internal/source/capture"
)

// Backfill asks for the rows table ("schema.table", one of the stream's
// Tables) holds now, delivered through Next as events with Op "read" (Key
// and New set, Old nil), in order with the live changes and with ids like
// every other event's. It returns the backfill's id once the request is
// recorded; the stream reads the table in chunks in the background, and a
// stream reopened on the same slot goes on where it stopped. A row's read
// event is never older than a change of the same row delivered before it.
// It fails for a table without a primary key or replica identity index, a
// table the stream does not capture, a table already being backfilled,
// and on PostgreSQL older than 14.
func (s *Stream) Backfill(ctx context.Context, table string) (int64, error) {
	return s.request(ctx, table, backfill.Request)
}

// Resync is Backfill with markers: the table's read events come between a
// resync_begin and a resync_end event carrying the returned id (Event.Resync).
// A consumer that removes at resync_end every row of the table it has not
// seen since resync_begin ends equal to the source (ResyncTracker does the
// bookkeeping); it is how a copy that missed changes is healed.
func (s *Stream) Resync(ctx context.Context, table string) (int64, error) {
	return s.request(ctx, table, backfill.RequestResync)
}

func (s *Stream) request(ctx context.Context, table string, request func(context.Context, backfill.TxBeginner, string, []backfill.Table, []string) ([]int64, error)) (int64, error) {
	if s.isClosed() {
		return 0, ErrClosed
	}
	var version string
	if err := s.pool.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		return 0, fmt.Errorf("backfill %s: read server_version: %w", table, err)
	}
	if !capture.SupportsMessages(version) {
		return 0, fmt.Errorf("backfill %s: needs PostgreSQL 14 or later; the source runs %s", table, version)
	}
	schema, name := backfill.SplitName(table)
	full := schema + "." + name
	known := false
	for _, t := range s.tables {
		if t == full {
			known = true
		}
	}
	if !known {
		return 0, fmt.Errorf("backfill %s: not one of the stream's tables", full)
	}
	t, err := backfill.Inspect(ctx, s.pool, full)
	if err != nil {
		return 0, fmt.Errorf("backfill: %w", err)
	}
	ids, err := request(ctx, s.pool, s.pipeline, []backfill.Table{t}, nil)
	if err != nil {
		return 0, err
	}
	s.filler.Wake()
	return ids[0], nil
}

// BackfillStatus reports a backfill's state ("queued", "running", "done",
// "cancelled" or "failed"), the rows read so far and the table's estimated
// row count.
func (s *Stream) BackfillStatus(ctx context.Context, id int64) (state string, rows, estimate int64, err error) {
	b, err := backfill.Get(ctx, s.pool, id)
	if err != nil {
		return "", 0, 0, err
	}
	return b.State, b.Rows, b.Estimate, nil
}
