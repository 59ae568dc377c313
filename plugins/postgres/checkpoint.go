package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/pluginkit"
	"github.com/walcast/walcast/plugins/internal/epochs"
)

// checkpoint is the last event id this sink wrote and the epoch of the
// batch that wrote it; epochs.Checkpoint says what it covers.
type checkpoint = epochs.Checkpoint

// prepareMirror creates the checkpoint table and this sink's row in it,
// checks the target tables of the sink's known tables, and returns the
// checkpoint.
func (s *Sink) prepareMirror(ctx context.Context) (checkpoint, error) {
	ct := s.cfg.checkpointTable
	if err := ensureSchema(ctx, s.pool, ct.schema); err != nil {
		return checkpoint{}, fmt.Errorf("create checkpoint table %s: %w", ct, err)
	}
	// The epoch column is added to a table an older sink created.
	if _, err := s.pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %[1]s (
			key text PRIMARY KEY,
			event_id text NOT NULL,
			epoch text NOT NULL DEFAULT '',
			updated_at timestamptz NOT NULL DEFAULT now());
		ALTER TABLE %[1]s ADD COLUMN IF NOT EXISTS epoch text NOT NULL DEFAULT ''`, ct.sql())); err != nil {
		return checkpoint{}, fmt.Errorf("create checkpoint table %s: %w", ct, err)
	}
	if err := s.createResyncsTable(ctx, s.pool); err != nil {
		return checkpoint{}, err
	}
	if _, err := s.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (key, event_id) VALUES ($1, '') ON CONFLICT (key) DO NOTHING`, ct.sql()), s.cfg.checkpointKey); err != nil {
		return checkpoint{}, fmt.Errorf("create checkpoint row %q in %s: %w", s.cfg.checkpointKey, ct, err)
	}
	var raw string
	var cp checkpoint
	if err := s.pool.QueryRow(ctx, fmt.Sprintf(`SELECT event_id, epoch FROM %s WHERE key = $1`, ct.sql()), s.cfg.checkpointKey).Scan(&raw, &cp.Epoch); err != nil {
		return checkpoint{}, fmt.Errorf("read checkpoint %q from %s: %w", s.cfg.checkpointKey, ct, err)
	}
	var err error
	cp.ID, err = parseCheckpoint(raw, ct, s.cfg.checkpointKey)
	return cp, err
}

func parseCheckpoint(raw string, ct qname, key string) (pluginkit.EventID, error) {
	if raw == "" {
		return pluginkit.EventID{}, nil
	}
	id, err := pluginkit.ParseEventID(raw)
	if err != nil {
		return id, fmt.Errorf("checkpoint %q in %s holds %q, not an event id: fix or delete that row: %w", key, ct, raw, err)
	}
	return id, nil
}

// lockCheckpoint reads the checkpoint in tx and locks its row until tx
// ends: a second writer with the same key (a zombie plugin, a second
// walcast) waits, then sees what this one committed and skips it. The
// sink's open resyncs are read in the same round trip.
func (s *Sink) lockCheckpoint(ctx context.Context, tx pgx.Tx) (checkpoint, resyncs, error) {
	ct := s.cfg.checkpointTable
	var raw, openRaw string
	var cp checkpoint
	err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT event_id, epoch, %s FROM %s WHERE key = $1 FOR UPDATE`, s.openResyncsSQL(), ct.sql()), s.cfg.checkpointKey).Scan(&raw, &cp.Epoch, &openRaw)
	if errors.Is(err, pgx.ErrNoRows) {
		return checkpoint{}, nil, fmt.Errorf("checkpoint row %q is missing from %s (deleted while walcast ran?): restart walcast to create it again", s.cfg.checkpointKey, ct)
	}
	if err != nil {
		return checkpoint{}, nil, fmt.Errorf("lock checkpoint %q in %s: %w", s.cfg.checkpointKey, ct, err)
	}
	open, err := parseResyncs(openRaw)
	if err != nil {
		return checkpoint{}, nil, err
	}
	cp.ID, err = parseCheckpoint(raw, ct, s.cfg.checkpointKey)
	return cp, open, err
}

// storeCheckpoint records id, and epoch unless it is empty (a host that
// predates epochs leaves the stored one).
func (s *Sink) storeCheckpoint(ctx context.Context, tx pgx.Tx, id pluginkit.EventID, epoch string) error {
	ct := s.cfg.checkpointTable
	_, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET event_id = $2, epoch = CASE WHEN $3 = '' THEN epoch ELSE $3 END, updated_at = now() WHERE key = $1`, ct.sql()),
		s.cfg.checkpointKey, id.String(), epoch)
	if err != nil {
		return fmt.Errorf("store checkpoint %s in %s: %w", id, ct, err)
	}
	return nil
}

// deliverMirror applies a batch and moves the checkpoint in one
// transaction. The checkpoint is read under a row lock in that same
// transaction, so what it filters is exactly what is committed, whatever
// happened to an earlier attempt (a commit whose answer was lost, a killed
// process). A replay batch (parked events, below the checkpoint) is
// applied whole and leaves the checkpoint where it is.
func (s *Sink) deliverMirror(ctx context.Context, pool *pgxpool.Pool, b pluginkit.Batch) (pluginkit.DeliverResult, error) {
	res, err := s.resolve(ctx, b.Events)
	if err != nil {
		s.forgetAll()
		return pluginkit.DeliverResult{}, s.classify("read the target tables", err)
	}
	var out pluginkit.DeliverResult
	failed, ferr := res.cut, res.cutErr
	err = s.inTx(ctx, pool, func(tx pgx.Tx) error {
		cp, open, err := s.lockCheckpoint(ctx, tx)
		if err != nil {
			return err
		}
		fresh := s.fresh(b, res, cp, &out)
		if err := s.apply(ctx, tx, fresh, open); err != nil {
			return err
		}
		return s.advance(ctx, tx, b, cp, res.cut)
	})
	if rowError(err) {
		// One of the rows was refused; find it, applying the rows before
		// it. The catalog may have changed under us (a dropped column).
		s.forgetAll()
		out, failed, ferr, err = s.isolate(ctx, pool, b, res)
	}
	if err != nil {
		return pluginkit.DeliverResult{}, s.classify(fmt.Sprintf("apply %d events %s..%s", len(b.Events), b.Events[0].ID, b.Events[len(b.Events)-1].ID), err)
	}
	if ferr != nil {
		return out, &pluginkit.BatchError{Failed: map[int]error{failed: ferr}}
	}
	return out, nil
}

// fresh returns the ops of events above the checkpoint (all of them in a
// replay batch, or in a batch of another epoch), counting the others as
// duplicates in out.
func (s *Sink) fresh(b pluginkit.Batch, res resolution, cp checkpoint, out *pluginkit.DeliverResult) []rowOp {
	if b.Replay {
		return res.ops
	}
	if !cp.Filters(b.Epoch) {
		s.log.Info("first batch of a new epoch (a failover, a restore or a lost slot since the checkpoint): applied whole, whatever its ids",
			"first", b.Events[0].ID.String(), "checkpoint", cp.ID.String(), "checkpoint_epoch", cp.Epoch, "epoch", b.Epoch)
		return res.ops
	}
	skipped := 0
	for _, e := range b.Events[:res.cut] {
		if e.ID.Compare(cp.ID) <= 0 {
			skipped++
		}
	}
	out.Duplicates = skipped
	if skipped > 0 {
		s.log.Info("skipped events already applied to the target", "duplicates", skipped, "first", b.Events[0].ID.String(), "checkpoint", cp.ID.String())
	}
	fresh := res.ops[:0:0]
	for _, op := range res.ops {
		if b.Events[op.index].ID.Compare(cp.ID) > 0 {
			fresh = append(fresh, op)
		}
	}
	return fresh
}

// advance stores the checkpoint at the last of the batch's first upTo
// events, all of which are applied (or had nothing to do), with the
// batch's epoch. Within an epoch it never moves back; the first batch of
// a new epoch moves it wherever its ids are. A replay batch leaves it
// alone.
func (s *Sink) advance(ctx context.Context, tx pgx.Tx, b pluginkit.Batch, cp checkpoint, upTo int) error {
	if b.Replay || upTo == 0 {
		return nil
	}
	next := cp.After(b.Events[upTo-1].ID, b.Epoch, b.Replay)
	if next == cp {
		return nil
	}
	return s.storeCheckpoint(ctx, tx, next.ID, next.Epoch)
}

// isolate applies the batch's fresh ops one at a time, each under a
// savepoint, up to the first the target refuses, and commits those before
// it with the checkpoint. It returns that event's index and error (as
// failed, ferr), or the resolution's own cut when every op applied.
func (s *Sink) isolate(ctx context.Context, pool *pgxpool.Pool, b pluginkit.Batch, res resolution) (out pluginkit.DeliverResult, failed int, ferr error, err error) {
	failed, ferr = res.cut, res.cutErr
	err = s.inTx(ctx, pool, func(tx pgx.Tx) error {
		cp, open, err := s.lockCheckpoint(ctx, tx)
		if err != nil {
			return err
		}
		for _, op := range s.fresh(b, res, cp, &out) {
			err := savepoint(ctx, tx, func() error { return s.apply(ctx, tx, []rowOp{op}, open) })
			if rowError(err) {
				e := b.Events[op.index]
				failed, ferr = op.index, s.classify(fmt.Sprintf("event %s (%s.%s %s)", e.ID, e.Schema, e.Table, e.Op), err)
				break
			}
			if err != nil {
				return err
			}
		}
		return s.advance(ctx, tx, b, cp, failed)
	})
	return out, failed, ferr, err
}

// savepoint runs fn under a savepoint, rolling back to it when fn fails.
func savepoint(ctx context.Context, tx pgx.Tx, fn func() error) error {
	if _, err := tx.Exec(ctx, "SAVEPOINT walcast_event"); err != nil {
		return err
	}
	if err := fn(); err != nil {
		if _, rerr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT walcast_event"); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	_, err := tx.Exec(ctx, "RELEASE SAVEPOINT walcast_event")
	return err
}

// inTx runs fn in a transaction and commits it.
func (s *Sink) inTx(ctx context.Context, pool *pgxpool.Pool, fn func(tx pgx.Tx) error) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // after Commit: a no-op
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		// The outcome may be unknown; the next attempt reads the
		// checkpoint under its lock, which settles it.
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
