package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/walcast/walcast/host/internal/config"
	"github.com/walcast/walcast/host/internal/source/backfill"
	"github.com/walcast/walcast/host/internal/source/capture"
)

// resyncOnGap reports whether the pipeline heals a gap by itself
// (source.on_gap = "resync").
func resyncOnGap(p *config.Pipeline) bool { return p.Source.OnGap == config.OnGapResync }

// healGap queues, after a start accepted a gap (on_gap = "resync"), a
// resync of the tables the gap concerns (tables; empty: every table of
// the pipeline) to the sinks that missed it (sinks; empty: every sink).
// An active backfill or resync of one of those tables for one of those
// sinks is cancelled first: its reading, or its resync_begin, may predate
// the gap, so a row it saw may have been deleted in the gap since. A
// table without a key cannot be re-read; it is named in the log and left
// out.
func healGap(ctx context.Context, db controlDB, p *config.Pipeline, gap string, tables, sinks []string, log *slog.Logger) error {
	var version string
	if err := db.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		return fmt.Errorf("on_gap = \"resync\": read server_version: %w", err)
	}
	if !capture.SupportsMessages(version) {
		return fmt.Errorf("on_gap = \"resync\" needs PostgreSQL 14 or later to resync after the gap (%s); the source runs %s: the gap is recorded, run walcast resync after an upgrade or set on_gap = \"stop\"", gap, version)
	}
	if len(tables) == 0 {
		tables = p.Source.Tables
	}
	var keyed []backfill.Table
	for _, name := range tables {
		t, err := backfill.Inspect(ctx, db, name)
		if errors.Is(err, backfill.ErrKeyless) {
			log.Warn("on_gap = resync: a table without a key cannot be resynced; its destinations may miss changes of the gap", "table", name, "err", err)
			continue
		}
		if err != nil {
			return fmt.Errorf("on_gap = \"resync\": %w", err)
		}
		cancelled, err := backfill.Cancel(ctx, db, p.Name, t, sinks)
		if err != nil {
			return fmt.Errorf("on_gap = \"resync\": %w", err)
		}
		if len(cancelled) > 0 {
			log.Info("on_gap = resync: cancelled a backfill or resync begun before the gap; the resync replaces it", "table", name, "cancelled", cancelled)
		}
		keyed = append(keyed, t)
	}
	if len(keyed) == 0 {
		return nil
	}
	ids, err := backfill.RequestResync(ctx, db, p.Name, keyed, sinks)
	if err != nil {
		return fmt.Errorf("on_gap = \"resync\": %w", err)
	}
	for i, t := range keyed {
		log.Warn("on_gap = resync: resyncing a table after the gap", "gap", gap, "table", t.String(), "resync", ids[i], "sinks", sinkNames(sinks))
	}
	return nil
}

func sinkNames(sinks []string) any {
	if len(sinks) == 0 {
		return "every sink"
	}
	return sinks
}
