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

// NeedsNewerServer lists what the pipeline's source block asks of a server
// of version serverVersion (server_version, e.g. "13.11") that it cannot
// do, each as the reason walcast run refuses to start: pgoutput streams
// logical decoding messages from PostgreSQL 14 on, and backfill_new_tables
// and the messages block need them. walcast run (prepareBackfills) and
// walcast validate --source both ask it, so they refuse alike.
func NeedsNewerServer(p *config.Pipeline, serverVersion string) []string {
	if capture.SupportsMessages(serverVersion) {
		return nil
	}
	var why []string
	if p.Source.BackfillNewTables {
		why = append(why, fmt.Sprintf("backfill_new_tables needs PostgreSQL 14 or later (the source runs %s): remove it from the source block", serverVersion))
	}
	if len(p.Source.Messages.Prefixes) > 0 {
		why = append(why, fmt.Sprintf("the source's messages block needs PostgreSQL 14 or later, whose pgoutput streams logical decoding messages (the source runs %s): remove the block", serverVersion))
	}
	return why
}

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
	if why := NeedsNewerServer(p, version); len(why) > 0 {
		return errors.New(why[0])
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
