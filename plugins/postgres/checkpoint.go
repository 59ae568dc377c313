package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/pluginkit"
)

// prepareMirror creates the checkpoint table and this sink's row in it,
// checks the target tables of the sink's known tables, and returns the
// checkpoint.
func (s *Sink) prepareMirror(ctx context.Context) (pluginkit.EventID, error) {
	ct := s.cfg.checkpointTable
	if err := ensureSchema(ctx, s.pool, ct.schema); err != nil {
		return pluginkit.EventID{}, fmt.Errorf("create checkpoint table %s: %w", ct, err)
	}
	if _, err := s.pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
			key text PRIMARY KEY,
			event_id text NOT NULL,
			updated_at timestamptz NOT NULL DEFAULT now())`, ct.sql())); err != nil {
		return pluginkit.EventID{}, fmt.Errorf("create checkpoint table %s: %w", ct, err)
	}
	if err := s.createResyncsTable(ctx, s.pool); err != nil {
		return pluginkit.EventID{}, err
	}
	if _, err := s.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (key, event_id) VALUES ($1, '') ON CONFLICT (key) DO NOTHING`, ct.sql()), s.cfg.checkpointKey); err != nil {
		return pluginkit.EventID{}, fmt.Errorf("create checkpoint row %q in %s: %w", s.cfg.checkpointKey, ct, err)
	}
	var raw string
	if err := s.pool.QueryRow(ctx, fmt.Sprintf(`SELECT event_id FROM %s WHERE key = $1`, ct.sql()), s.cfg.checkpointKey).Scan(&raw); err != nil {
		return pluginkit.EventID{}, fmt.Errorf("read checkpoint %q from %s: %w", s.cfg.checkpointKey, ct, err)
	}
	return parseCheckpoint(raw, ct, s.cfg.checkpointKey)
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
func (s *Sink) lockCheckpoint(ctx context.Context, tx pgx.Tx) (pluginkit.EventID, resyncs, error) {
	ct := s.cfg.checkpointTable
	var raw, openRaw string
	err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT event_id, %s FROM %s WHERE key = $1 FOR UPDATE`, s.openResyncsSQL(), ct.sql()), s.cfg.checkpointKey).Scan(&raw, &openRaw)
	if errors.Is(err, pgx.ErrNoRows) {
		return pluginkit.EventID{}, nil, fmt.Errorf("checkpoint row %q is missing from %s (deleted while walcast ran?): restart walcast to create it again", s.cfg.checkpointKey, ct)
	}
	if err != nil {
		return pluginkit.EventID{}, nil, fmt.Errorf("lock checkpoint %q in %s: %w", s.cfg.checkpointKey, ct, err)
	}
	open, err := parseResyncs(openRaw)
	if err != nil {
		return pluginkit.EventID{}, nil, err
	}
	cp, err := parseCheckpoint(raw, ct, s.cfg.checkpointKey)
	return cp, open, err
}

func (s *Sink) storeCheckpoint(ctx context.Context, tx pgx.Tx, id pluginkit.EventID) error {
	ct := s.cfg.checkpointTable
	_, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET event_id = $2, updated_at = now() WHERE key = $1`, ct.sql()), s.cfg.checkpointKey, id.String())
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
// replay batch), counting the others as duplicates in out.
func (s *Sink) fresh(b pluginkit.Batch, res resolution, cp pluginkit.EventID, out *pluginkit.DeliverResult) []rowOp {
	if b.Replay {
		return res.ops
	}
	skipped := 0
	for _, e := range b.Events[:res.cut] {
		if e.ID.Compare(cp) <= 0 {
			skipped++
		}
	}
	out.Duplicates = skipped
	if skipped > 0 {
		s.log.Info("skipped events already applied to the target", "duplicates", skipped, "first", b.Events[0].ID.String(), "checkpoint", cp.String())
	}
	fresh := res.ops[:0:0]
	for _, op := range res.ops {
		if b.Events[op.index].ID.Compare(cp) > 0 {
			fresh = append(fresh, op)
		}
	}
	return fresh
}

// advance stores the checkpoint at the last of the batch's first upTo
// events, all of which are applied (or had nothing to do); it never moves
// back, and a replay batch leaves it alone.
func (s *Sink) advance(ctx context.Context, tx pgx.Tx, b pluginkit.Batch, cp pluginkit.EventID, upTo int) error {
	if b.Replay || upTo == 0 {
		return nil
	}
	last := b.Events[upTo-1].ID
	if last.Compare(cp) <= 0 {
		return nil
	}
	return s.storeCheckpoint(ctx, tx, last)
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
