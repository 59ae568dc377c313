package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walcast/walcast/pluginkit"
)

// createHistoryTable creates the history table when missing. Its primary
// key is the event id's two parts, so each event is stored once however
// often it is delivered, and ORDER BY lsn, idx is commit order (the id's
// text does not sort that way).
func createHistoryTable(ctx context.Context, q querier, name qname) error {
	if err := ensureSchema(ctx, q, name.schema); err != nil {
		return fmt.Errorf("create history table %s: %w", name, err)
	}
	sql := fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (
			lsn pg_lsn NOT NULL,
			idx bigint NOT NULL,
			id text NOT NULL,
			xid bigint,
			commit_time timestamptz,
			schema_name text NOT NULL,
			table_name text NOT NULL,
			op text NOT NULL,
			key jsonb,
			new jsonb,
			old jsonb,
			unchanged text[],
			"cascade" boolean,
			restart_identity boolean,
			PRIMARY KEY (lsn, idx))`, name.sql())
	if _, err := q.Exec(ctx, sql); err != nil {
		return fmt.Errorf("create history table %s: %w", name, err)
	}
	return nil
}

// historySQL inserts the envelopes of the JSON array $1, one row each,
// skipping those already stored.
func historySQL(name qname) string {
	return fmt.Sprintf(`INSERT INTO %s (lsn, idx, id, xid, commit_time, schema_name, table_name, op, key, new, old, unchanged, "cascade", restart_identity)
		SELECT (e.v->>'commit_lsn')::pg_lsn, split_part(e.v->>'id', ':', 2)::bigint, e.v->>'id',
			(e.v->>'xid')::bigint, (e.v->>'commit_time')::timestamptz, e.v->>'schema', e.v->>'table', e.v->>'op',
			nullif(e.v->'key', 'null'), nullif(e.v->'new', 'null'), nullif(e.v->'old', 'null'),
			CASE WHEN jsonb_typeof(e.v->'unchanged') = 'array' THEN ARRAY(SELECT jsonb_array_elements_text(e.v->'unchanged')) END,
			(e.v->>'cascade')::boolean, (e.v->>'restart_identity')::boolean
		FROM jsonb_array_elements($1::jsonb) AS e(v)
		ON CONFLICT (lsn, idx) DO NOTHING`, name.sql())
}

// deliverHistory appends the batch's events in one statement. An event
// already stored (a redelivery) is skipped and counted as a duplicate,
// except in a replay batch, where it is simply there already. When the
// server refuses one event (a value jsonb cannot hold), the events are
// inserted one by one and those it refuses are named in a BatchError.
func (s *Sink) deliverHistory(ctx context.Context, pool *pgxpool.Pool, b pluginkit.Batch) (pluginkit.DeliverResult, error) {
	sql := historySQL(s.cfg.historyTable)
	payloads := make([][]byte, len(b.Events))
	for i, e := range b.Events {
		payloads[i] = e.Payload
	}
	tag, err := pool.Exec(ctx, sql, jsonArray(payloads))
	what := fmt.Sprintf("append %d events %s..%s to %s", len(b.Events), b.Events[0].ID, b.Events[len(b.Events)-1].ID, s.cfg.historyTable)
	if err == nil {
		return s.historyResult(b, len(b.Events)-int(tag.RowsAffected())), nil
	}
	if !rowError(err) {
		return pluginkit.DeliverResult{}, s.classify(what, err)
	}
	failed := map[int]error{}
	stored := 0
	err = s.inTx(ctx, pool, func(tx pgx.Tx) error {
		for i, e := range b.Events {
			err := savepoint(ctx, tx, func() error {
				t, err := tx.Exec(ctx, sql, jsonArray([][]byte{e.Payload}))
				stored += int(t.RowsAffected())
				return err
			})
			if rowError(err) {
				failed[i] = s.classify(fmt.Sprintf("append event %s (%s.%s %s) to %s", e.ID, e.Schema, e.Table, e.Op, s.cfg.historyTable), err)
				continue
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return pluginkit.DeliverResult{}, s.classify(what, err)
	}
	res := s.historyResult(b, len(b.Events)-len(failed)-stored)
	if len(failed) == len(b.Events) {
		return res, failed[0]
	}
	return res, &pluginkit.BatchError{Failed: failed}
}

func (s *Sink) historyResult(b pluginkit.Batch, dups int) pluginkit.DeliverResult {
	if dups == 0 || b.Replay {
		return pluginkit.DeliverResult{}
	}
	s.log.Info("skipped events already in the history table", "duplicates", dups, "first", b.Events[0].ID.String())
	return pluginkit.DeliverResult{Duplicates: dups}
}
