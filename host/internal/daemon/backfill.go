package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/walcast/walcast/host/internal/config"
	"github.com/walcast/walcast/host/internal/control/schema"
	"github.com/walcast/walcast/host/internal/source/backfill"
	"github.com/walcast/walcast/host/internal/source/capture"
)

// prepareBackfills creates the backfill tables, refuses backfill_new_tables
// and the messages block on a server that cannot stream logical decoding
// messages, and queues a backfill of
// every table the pipeline lists for the first time when
// backfill_new_tables is set. The tables seen are recorded either way, so
// that turning the option on later backfills only tables added after.
func prepareBackfills(ctx context.Context, db controlDB, p *config.Pipeline, log *slog.Logger) error {
	if err := schema.Migrate(ctx, db); err != nil {
		return err
	}
	var version string
	if err := db.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		return fmt.Errorf("read server_version: %w", err)
	}
	if p.Source.BackfillNewTables && !capture.SupportsMessages(version) {
		return fmt.Errorf("backfill_new_tables needs PostgreSQL 14 or later (the source runs %s): remove it from the source block", version)
	}
	if len(p.Source.Messages.Prefixes) > 0 && !capture.SupportsMessages(version) {
		return fmt.Errorf("the source's messages block needs PostgreSQL 14 or later, whose pgoutput streams logical decoding messages (the source runs %s): remove the block", version)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("record tables: %w", err)
	}
	defer tx.Rollback(context.Background())
	fresh, err := backfill.NewTables(ctx, tx, p.Name, p.Source.Tables)
	if err != nil {
		return err
	}
	if p.Source.BackfillNewTables {
		var tables []backfill.Table
		for _, name := range fresh {
			t, err := backfill.Inspect(ctx, tx, name)
			if errors.Is(err, backfill.ErrKeyless) {
				log.Warn("backfill_new_tables: not backfilling a table without a key", "table", name, "err", err)
				continue
			}
			if err != nil {
				return err
			}
			tables = append(tables, t)
		}
		if len(tables) > 0 {
			ids, err := backfill.Request(ctx, tx, p.Name, tables, nil)
			if err != nil {
				return err
			}
			for i, t := range tables {
				log.Info("backfill_new_tables: backfilling a new table", "table", t.String(), "backfill", ids[i])
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("record tables: %w", err)
	}
	return nil
}
